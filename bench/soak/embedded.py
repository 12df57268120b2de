"""The soak's embedded runtime: ``fx.Runtime`` on SQLite with the in-process queue, one process.

``python -m bench.soak.embedded --plan PLAN`` (store, lease timing and agents from the
``FXD_*`` environment, as a worker's) runs the turns of every submission in ``PLAN`` (JSON
lines ``{"session", "request", "prompt"}``, appended by the soak while it runs) and submits
each line as it appears. A restarted process submits every line again: admission is idempotent
on the request id, so each is admitted once, and the runtime's reconciliation at start recovers
the turns the SIGKILLed process left. SIGTERM stops it at the next step boundary.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

import fxdurable as fx
from bench.soak.agent import agents
from bench.soak.ledger import read_jsonl

log = logging.getLogger("bench.soak.embedded")


async def run(plan: Path) -> None:
    settings = fx.WorkerSettings.from_env()
    store = os.environ["FXD_STORE"]
    rt = fx.Runtime(agents(), store=store, queue="local", settings=settings, concurrency=4)
    async with rt:
        rt.install_signal_handlers()
        done = 0
        print(f"embedded runtime on {store}: submitting from {plan}", flush=True)
        while not rt.stop_requested:
            lines = read_jsonl(plan)
            while done < len(lines) and not rt.stop_requested:
                line = lines[done]
                try:
                    await rt.session(line["session"]).submit(
                        line["prompt"], request_id=line["request"]
                    )
                    done += 1
                except fx.FxDurableError as exc:  # the store away: the same request id later
                    log.warning("submission %s not admitted yet: %s", line["request"], exc)
                    break
            await asyncio.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(args.plan))


if __name__ == "__main__":
    main()
