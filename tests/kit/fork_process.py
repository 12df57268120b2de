"""A forking process for the crash suites: fork a session, optionally talk to the fork.

``python -m tests.kit.fork_process --store URL --dir WORLD --source S --into F [--after A]
[--next PROMPT --request-id R]``. ``--after`` is a submission id, or digits for an event
cursor; absent, everything recorded so far. With ``FXD_CRASH_AT=fork.before-commit`` (or
``fork.after-commit``) it dies by SIGKILL inside the fork's transaction (or just after it).
``--next`` then admits PROMPT to the fork and runs it in this process (an embedded runtime on
the local queue) until it settles. Prints ``{"created": ..., "after": ..., "messages": ...}``
and, with ``--next``, ``{"status": ..., "text": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import fxdurable as fx
from tests.kit.story import story_agent


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--store", "--dir", "--source", "--into"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--after", default=None)
    parser.add_argument("--next", default=None)
    parser.add_argument("--request-id", default=None)
    args = parser.parse_args()
    after: str | int | None = args.after
    if args.after is not None and args.after.isdigit():
        after = int(args.after)
    agents = [story_agent(Path(args.dir))]
    settings = fx.WorkerSettings(lease_ttl_s=5.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime(agents, store=args.store, settings=settings) as rt:
        fork = await rt.fork(args.source, args.into, after=after)
        print(json.dumps({"created": fork.created, "after": fork.after, "messages": fork.messages}))
        if args.next is not None:
            session = rt.session(fork.session_id)
            sub = await session.submit(args.next, request_id=args.request_id)
            done = await session.wait(sub.id, timeout=40)
            print(json.dumps({"status": str(done.status), "text": done.result}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
