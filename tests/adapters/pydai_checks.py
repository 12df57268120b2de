"""What every crash test of the pydantic-ai adapter checks once its session is at rest, on
any store and queue: the outside world of ``pydai_agent.py`` against the records."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from fxdurable.backends import open_store
from fxdurable.testing import Effect, check_effects, check_store

REPO = Path(__file__).resolve().parents[2]
UNKNOWN = "may or may not have completed"

# (crash point, deploys the world saw, whether the model was told the deploy is unknown)
MATRIX = [
    ("tool.after-intent:deploy", 0, True),
    ("tool.after-execute:deploy", 1, True),
    ("tool.after-execute:record_note", 1, False),
    ("model.mid-stream", 1, False),
    ("turn.in-commit", 1, False),
]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def effects(world: Path) -> list[Effect]:
    found = []
    for name in ("effects.log", "notes.log"):
        for line in lines(world / name):
            kind, key = line.split()
            found.append(Effect("deploy" if kind == "deploy" else "record_note", key))
    return found


def assert_checked(store: str, world: Path) -> None:
    """The store's invariants and the effects hold, and ``fxdurable check`` says so."""
    opened = open_store(store)
    try:
        summary = opened.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        violations = opened.read(lambda v: check_effects(v, effects(world)))
    finally:
        opened.close()
    assert not summary.violations and not violations, (summary.violations, violations)
    cli = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--store", store, "--at-rest"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0 and "every invariant holds" in cli.stdout, cli.stdout + cli.stderr


def assert_recovered(
    world: Path, spec: str, *, deploys: int, unknown: bool, text: str | None, crashed_pid: int
) -> None:
    """After a SIGKILL at ``spec`` (in process ``crashed_pid``) and a run to rest that
    completed with ``text``: the deploy took ``deploys`` effects (at most one), the model was
    told its outcome is unknown (and its blind repeat refused once) when ``unknown``, the
    idempotent note took effect once under its one execution id, and the recovering process
    started from the records."""
    assert len(lines(world / "effects.log")) == deploys  # at most once, never re-run
    requests = [json.loads(x) for x in lines(world / "model.log")]
    recovered = [r for r in requests if r["pid"] != crashed_pid]
    if spec == "turn.in-commit":
        # Killed inside the settling transaction: the final answer was recorded before it,
        # and recovery settles with it, without asking the model again.
        assert recovered == [], recovered
    else:
        # The recovering process started from the records: its first request already shows
        # the results the crashed process recorded (the read, the note once recorded).
        assert recovered and recovered[0]["shown"][0] == ["read_status", "eu: healthy"]
    told = [r for r in recovered if any(n == "deploy" and UNKNOWN in t for n, t in r["shown"])]
    if unknown:
        assert told, requests  # the model read the unknown-outcome message
        assert text == "deploy outcome unknown; not repeated"
        refused = [t for n, t in recovered[-1]["shown"] if n == "deploy" and "Refused" in t]
        assert len(refused) == 1, recovered[-1]  # the first blind repeat was refused
    else:
        assert not told and (text or "").startswith("deployed: "), text
    notes, runs = lines(world / "notes.log"), lines(world / "calls.log")
    assert len(notes) == 1, notes  # the idempotent write took effect once
    # ... however often it ran, always with one key: twice when killed after its execution.
    assert len(runs) == (2 if spec == "tool.after-execute:record_note" else 1), runs
    assert {r.split()[1] for r in runs} == {notes[0].split()[1]}, (runs, notes)


class Harness(Protocol):
    """What a worker harness (tests/workers: RQ or SQS) offers the follow-up check."""

    world_dir: Path
    store_url: str

    def submit_one(self, session: str, prompt: str, request_id: str) -> str: ...
    def wait_settled(self, sub_ids: Sequence[str], timeout: float = ...) -> Sequence[Any]: ...
    def stop_workers(self) -> list[int]: ...
    def diagnostics(self) -> str: ...


def assert_followed_up(h: Harness, session: str, *, deploys: int) -> None:
    """With a worker running: the recovered session answers its next message (a read), no
    deploy ran since, and the store still checks clean. Stops the workers."""
    nxt = h.submit_one(session, "status?", "pa-2")
    (done,) = h.wait_settled([nxt], timeout=30)
    assert h.stop_workers() == [0], h.diagnostics()
    assert (done.status, done.result_text) == ("completed", "status: eu: healthy")
    assert len(lines(h.world_dir / "effects.log")) == deploys
    assert_checked(h.store_url, h.world_dir)
