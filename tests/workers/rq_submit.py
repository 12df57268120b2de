"""A submitting process for the RQ worker tests: admit one prompt and enqueue its wake.

``python rq_submit.py --store URL --queue rq://... --session S --prompt P --request-id R``;
with ``FXD_CRASH_AT=submission.after-admit`` it dies by SIGKILL between the admission's commit
and the enqueue, so no wake is ever sent: only a worker's reconciliation scan can find the work.
Prints ``{"submission": id, "status": ...}`` on success.
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
    for flag in ("--store", "--queue", "--session", "--prompt", "--request-id"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    agents = [story_agent(Path("."))]
    async with fx.Runtime(agents, store=args.store, queue=args.queue) as rt:
        sub = await rt.session(args.session).submit(args.prompt, request_id=args.request_id)
    print(json.dumps({"submission": sub.id, "status": str(sub.status)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
