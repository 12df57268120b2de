"""A real process running the pydantic-ai agent (``pydai_agent.py``) to rest in an embedded
runtime: ``python pydai_driver.py --store URL --dir WORLD [--next]``, with ``FXD_CRASH_AT``
set to SIGKILL it at a crash point. Submits ``deploy r1`` (request id ``pa-1``; ``--next``:
``status?``, request id ``pa-2``) to session ``s`` (admission is idempotent: a rerun after a
crash gets the same submission), waits until it has settled and
prints one ``outcome {json}`` line.

The other adapters' crash tests are drivers of the same run to rest with their agent in place
of this one: run as a script, each calls ``serve(build)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

# Run as a script, its own directory is on sys.path: pydai_agent imports from there.
from pydai_agent import build

import fxdurable as fx


async def main(args: argparse.Namespace, agent: Callable[[Path], fx.Agent]) -> int:
    world = Path(args.dir)
    settings = fx.WorkerSettings(lease_ttl_s=2.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime([agent(world)], store=args.store, settings=settings) as rt:
        session = rt.session("s")
        prompt, request_id = ("status?", "pa-2") if args.next else ("deploy r1", "pa-1")
        sub = await session.submit(prompt, request_id=request_id)
        done = await session.wait(sub.id, timeout=40)
    outcome = {"request_id": done.request_id, "status": str(done.status), "text": done.result}
    print("outcome " + json.dumps(outcome), flush=True)
    return 0


def serve(agent: Callable[[Path], fx.Agent]) -> int:
    """This driver's run to rest, with the agent ``agent(world)`` builds: its command line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--next", action="store_true")
    return asyncio.run(main(parser.parse_args(), agent))


if __name__ == "__main__":
    sys.exit(serve(build))
