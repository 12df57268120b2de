"""A pydantic-ai agent SIGKILLed at each crash point that matters, in a real process on the
embedded SQLite runtime (``pydai_driver.py``), then run to rest and checked
(``pydai_checks.py``): the deploy happened at most once, the model was told when its outcome
is unknown (and its first blind repeat refused), the idempotent note took effect once per
execution id, ``fxdurable check`` is clean, and the session completes a follow-up. The same
matrix on RQ workers: ``tests/workers/test_rq_pydantic_ai.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pydai_checks import MATRIX, REPO, assert_checked, assert_recovered, lines

DRIVER = Path(__file__).resolve().with_name("pydai_driver.py")

pytestmark = [pytest.mark.crash, pytest.mark.slow]


# Kills a driver started without a crash point, once it is where the test wants it (an MCP
# call blocked on its server, say): given the process and the world.
Killer = Callable[["subprocess.Popen[str]", Path], None]


def start(
    driver: Path,
    store: str,
    world: Path,
    crash_at: str | None = None,
    *,
    follow_up: bool = False,
    argv: Sequence[str] = (),
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    command = [sys.executable, str(driver), *argv, "--store", store, "--dir", str(world)]
    return subprocess.Popen(
        command + (["--next"] if follow_up else []),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(
    driver: Path,
    store: str,
    world: Path,
    crash_at: str | None = None,
    *,
    follow_up: bool = False,
    argv: Sequence[str] = (),
    kill: Killer | None = None,
) -> tuple[int, str, str]:
    proc = start(driver, store, world, crash_at, follow_up=follow_up, argv=argv)
    try:
        if kill is not None:
            kill(proc, world)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def outcome(stdout: str) -> dict[str, str]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("outcome ")]
    parsed: dict[str, str] = json.loads(line.removeprefix("outcome "))
    return parsed


def kill_and_recover(
    tmp_path: Path,
    spec: str,
    deploys: int,
    unknown: bool,
    *,
    driver: Path = DRIVER,
    framework: str = "pydantic-ai",
    argv: Sequence[str] = (),
    kill: Killer | None = None,
) -> None:
    """The crash test of every adapter: ``driver`` (this driver, or an adapter's crash test run
    as a script, with ``argv``) killed at ``spec`` (or, with ``kill``, by ``kill``, ``spec``
    then naming the moment), run to rest, checked, then answering a follow-up; every model
    request served by ``framework``'s agent."""
    store, world = f"sqlite:///{tmp_path}/pydai.db", tmp_path / "world"
    world.mkdir(exist_ok=True)
    if kill is None:
        code, out, err = run(driver, store, world, spec, argv=argv)
        assert code == -signal.SIGKILL and f"crash injected at {spec}" in err, (code, out, err)
    else:
        code, out, err = run(driver, store, world, argv=argv, kill=kill)
        assert code == -signal.SIGKILL, (code, out, err)
    crashed_pid = json.loads(lines(world / "model.log")[-1])["pid"]

    code, out, err = run(driver, store, world, argv=argv)
    assert code == 0 and "Traceback" not in err, (code, out, err)
    done = outcome(out)
    assert done["status"] == "completed", done
    assert_recovered(
        world, spec, deploys=deploys, unknown=unknown, text=done["text"], crashed_pid=crashed_pid
    )
    assert_checked(store, world)

    code, out, err = run(driver, store, world, follow_up=True, argv=argv)
    assert code == 0, (code, out, err)
    assert outcome(out) == {
        "request_id": "pa-2",
        "status": "completed",
        "text": "status: eu: healthy",
    }
    assert len(lines(world / "effects.log")) == deploys
    assert_checked(store, world)
    served = {json.loads(x).get("framework") for x in lines(world / "model.log")}
    assert served == {framework}, served


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_killed_pydantic_ai_turn_resumes_from_its_last_step(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    kill_and_recover(tmp_path, spec, deploys, unknown)
