"""A pydantic-ai agent SIGKILLed at each crash point that matters, in a real process on the
embedded SQLite runtime (``pydai_driver.py``), then run to rest and checked: the deploy
happened at most once, the model was told when its outcome is unknown (and its first blind
repeat refused), the idempotent note once per execution id, ``fxdurable check`` clean, and
the session completes a follow-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fxdurable.backends import open_store
from fxdurable.testing import Effect, check_effects, check_store

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("pydai_driver.py")
UNKNOWN = "may or may not have completed"

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def run(store: str, world: Path, crash_at: str | None = None, *, follow_up: bool = False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    argv = [sys.executable, str(DRIVER), "--store", store, "--dir", str(world)]
    done = subprocess.run(
        argv + (["--next"] if follow_up else []),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def outcome(stdout: str) -> dict[str, str]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("outcome ")]
    parsed: dict[str, str] = json.loads(line.removeprefix("outcome "))
    return parsed


def effects(world: Path) -> list[Effect]:
    found = []
    for name in ("effects.log", "notes.log"):
        for line in lines(world / name):
            kind, key = line.split()
            found.append(Effect("deploy" if kind == "deploy" else "record_note", key))
    return found


def assert_checked(store: str, world: Path) -> None:
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


# (crash point, deploys the world saw, whether the model was told the deploy is unknown)
MATRIX = [
    ("tool.after-intent:deploy", 0, True),
    ("tool.after-execute:deploy", 1, True),
    ("tool.after-execute:record_note", 1, False),
    ("model.mid-stream", 1, False),
    ("turn.in-commit", 1, False),
]


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_killed_pydantic_ai_turn_resumes_from_its_last_step(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    store, world = f"sqlite:///{tmp_path}/pydai.db", tmp_path / "world"
    world.mkdir()
    code, out, err = run(store, world, spec)
    assert code == -signal.SIGKILL and f"crash injected at {spec}" in err, (code, out, err)
    crashed_pid = json.loads(lines(world / "model.log")[-1])["pid"]

    code, out, err = run(store, world)
    assert code == 0 and "Traceback" not in err, (code, out, err)
    done = outcome(out)
    assert done["status"] == "completed", done
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
        assert done["text"] == "deploy outcome unknown; not repeated"
        refused = [t for n, t in recovered[-1]["shown"] if n == "deploy" and "Refused" in t]
        assert len(refused) == 1, recovered[-1]  # the first blind repeat was refused
    else:
        assert not told and (done["text"] or "").startswith("deployed: "), done
    notes, runs = lines(world / "notes.log"), lines(world / "calls.log")
    assert len(notes) == 1, notes  # the idempotent write took effect once
    # ... however often it ran, always with one key: twice when killed after its execution.
    assert len(runs) == (2 if spec == "tool.after-execute:record_note" else 1), runs
    assert {r.split()[1] for r in runs} == {notes[0].split()[1]}, (runs, notes)
    assert_checked(store, world)

    code, out, err = run(store, world, follow_up=True)
    assert code == 0, (code, out, err)
    assert outcome(out) == {
        "request_id": "pa-2",
        "status": "completed",
        "text": "status: eu: healthy",
    }
    assert len(lines(world / "effects.log")) == deploys
    assert_checked(store, world)
