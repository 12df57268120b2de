"""A real process running one coding turn on a stored workspace, to rest.

Run as ``python tests/tools/stored_driver.py --store URL --template DIR``, with
``FXD_CRASH_AT=<point>[:<tool>]`` in the environment to SIGKILL it at a crash point. Every
run submits the same request id (a client retrying its POST), so a second run after a crash
recovers the first run's turn: the second half of the turn runs in another process, on the
files the first one committed to the store.

The turn (session ``ws``): ``write_file notes.txt`` -> ``edit_file app.py`` (``return 1`` ->
``return 2``) -> ``shell`` (``cat app.py notes.txt > combined.txt``) -> ``read_file
combined.txt`` -> "done". Prints the submission's outcome and answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import fxdurable as fx  # noqa: E402
from fxdurable import tools as fxt  # noqa: E402
from fxdurable.runtime.models.scripted import turn_messages  # noqa: E402

SESSION = "ws"
REQUEST = "stored-1"
STEPS = [
    fx.call("write_file", path="notes.txt", content="hello from the first half\n"),
    fx.call("edit_file", path="app.py", old_text="return 1", new_text="return 2"),
    fx.call("shell", command="cat app.py notes.txt > combined.txt"),
    fx.call("read_file", path="combined.txt"),
]


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    done = sum(1 for m in turn_messages(request) if m.role == "assistant")
    if done < len(STEPS):
        return fx.reply("", STEPS[done])
    return fx.reply("done")


async def main_async(store: str, template: str) -> int:
    agent = fx.Agent(
        "coder", fx.ScriptedModel(policy), tools=fxt.workspace_tools(fxt.stored(template))
    )
    settings = fx.WorkerSettings(lease_ttl_s=5.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime([agent], store=store, settings=settings, shutdown_grace_s=2.0) as rt:
        session = rt.session(SESSION)
        submission = await session.submit("fix app.py", request_id=REQUEST)
        settled = await session.wait(submission.id, timeout=45)
        print(settled.status.value, settled.result, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--template", required=True)
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args.store, args.template))


if __name__ == "__main__":
    sys.exit(main())
