"""Memory held by a worker that stays up through one long session: RSS after 1,000 turns of
one session ÷ RSS after 100 (issue 10: ≤ 1.10).

Runs in a subprocess of its own (``python -m bench.rss_turns``) so nothing else the bench has
loaded or allocated counts. One embedded :class:`~fxdurable.Runtime` on a SQLite store runs the
turns one after another in ONE session; each turn is a model answer without tools (so the
session grows by a few events a turn and the run stays within the bench's time). RSS is read
from ``/proc/self/status`` (``VmRSS``) after a ``gc.collect()``. The scripted model's record of
the requests it was shown (kept for tests, each holding the whole history) is cleared after
every turn: left alone it holds O(turns²) messages and dwarfs the runtime's own figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.runtime_turns import SETTINGS
from bench.sqlite_steps import sqlite_url
from fxdurable import Agent, Runtime, ScriptedModel, reply

__all__ = ["RssFigures", "measure_rss"]

ANSWER = "Noted."


@dataclass(frozen=True, slots=True)
class RssFigures:
    turns_early: int
    turns_late: int
    rss_early: int  # bytes
    rss_late: int

    @property
    def ratio(self) -> float:
        return self.rss_late / self.rss_early


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _run(path: Path, early: int, late: int) -> dict[str, int]:
    model = ScriptedModel([reply(ANSWER)])
    agent = Agent("rss", model)
    rss: dict[str, int] = {}
    async with Runtime([agent], store=sqlite_url(path), settings=SETTINGS) as rt:
        session = rt.session("long", agent="rss")
        for turn in range(1, late + 1):
            if await session.run(f"Turn {turn}.", timeout=120) != ANSWER:
                raise RuntimeError(f"turn {turn} of the RSS session did not answer")
            # The fake keeps every request it was shown, for tests; a real model keeps none.
            model.requests.clear()
            if turn in (early, late):
                gc.collect()
                rss[str(turn)] = rss_bytes()
    return rss


def measure_rss(tmp: Path, *, early: int, late: int) -> RssFigures:
    """RSS after ``early`` and after ``late`` turns, measured in a subprocess."""
    tmp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.rss_turns", str(tmp / "rss.db"), str(early), str(late)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the RSS run failed:\n{proc.stderr[-2000:]}")
    rss = json.loads(proc.stdout.strip().splitlines()[-1])
    return RssFigures(early, late, rss[str(early)], rss[str(late)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db", type=Path)
    parser.add_argument("early", type=int)
    parser.add_argument("late", type=int)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args.db, args.early, args.late))))
