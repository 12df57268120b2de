"""The crash harness (DESIGN §5): real processes, SIGKILLed at named points, then checked.

Imported by ``conftest.py`` (which puts this directory on ``sys.path``) and the crash tests.

``run_to_rest`` starts ``driver.py`` as a subprocess (``FXD_CRASH_AT`` set for a crash run,
removed otherwise) and returns ``(returncode, stdout, stderr)``. The :class:`CrashHarness`
fixture ``crash`` strings runs together: each crash run must die by SIGKILL *at its point*
(a crash point that never fires means the path was not exercised), then a clean run must reach
rest, then every invariant is checked from the store and the outside world (``tests.kit.world``,
shared with the RQ and HTTP suites), then a ``--next`` run must complete a follow-up message,
and the invariants are checked again.

The store is a fixture parametrised by backend (``store_url`` in ``conftest.py``): a Redis or
DynamoDB crash suite adds a param (and its setup/teardown) and reuses every test unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from tests.kit.story import NEXT_REQUEST, STORY_REQUEST
from tests.kit.world import World, assert_invariants, read_store, read_world

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("driver.py")
PROCESS_TIMEOUT_S = 60.0
# Small enough that the story needs several invocations (the driver makes each tool take a
# little time in this scenario), large enough that every invocation makes progress.
CONTINUATION_BUDGET_S = 0.05

T = TypeVar("T")


def clean_env(crash_at: str | None) -> dict[str, str]:
    # FXD_CRASH_TURN_TIMEOUT_S is the test's own setting for its driver (the turn budget).
    kept = ("FXD_CRASH_TURN_TIMEOUT_S",)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_") or k in kept}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    return env


def run_process(
    argv: Sequence[str], *, crash_at: str | None = None, timeout: float = PROCESS_TIMEOUT_S
) -> tuple[int, str, str]:
    """Run one real process; a hang is a test failure, with whatever it printed."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=REPO,
            env=clean_env(crash_at),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{' '.join(argv)} (FXD_CRASH_AT={crash_at}) still running after {timeout:g}s\n"
            f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}"
        )
    return done.returncode, done.stdout, done.stderr


def run_to_rest(
    store_url: str,
    workdir: Path,
    crash_at: str | None = None,
    scenario: str = "story",
    *,
    follow_up: bool = False,
    invocation_budget: float | None = None,
    max_attempts: int | None = None,
    hostname: str | None = None,
    timeout: float = PROCESS_TIMEOUT_S,
    provider: str = "inprocess",
    partial_every: float | None = None,
    extra_args: Sequence[str] = (),
) -> tuple[int, str, str]:
    """Start the driver and let it run until its session rests (or the crash point kills it).

    ``provider`` ``openai`` / ``anthropic`` serves the scripted model over HTTP in that wire
    format (the real httpx + SSE client); ``extra_args`` go to the driver as they are."""
    argv = [
        sys.executable,
        str(DRIVER),
        "--store",
        store_url,
        "--dir",
        str(workdir),
        "--scenario",
        scenario,
        "--timeout",
        str(timeout - 10),
    ]
    if invocation_budget is None and scenario == "continuation":
        invocation_budget = CONTINUATION_BUDGET_S
    if invocation_budget is not None:
        argv += ["--invocation-budget", str(invocation_budget)]
    if max_attempts is not None:
        argv += ["--max-attempts", str(max_attempts)]
    if hostname is not None:
        argv += ["--hostname", hostname]
    if provider != "inprocess":
        argv += ["--provider", provider]
    if partial_every is not None:
        argv += ["--partial-every", str(partial_every)]
    argv += list(extra_args)
    if follow_up:
        argv.append("--next")
    return run_process(argv, crash_at=crash_at, timeout=timeout)


def assert_crashed(result: tuple[int, str, str], spec: str) -> None:
    """The process died by SIGKILL at exactly ``spec``: not a bug, not a clean exit."""
    code, out, err = result
    assert code == -signal.SIGKILL and f"crash injected at {spec}" in err, (
        f"expected a SIGKILL at {spec} (the crash point must fire), got returncode {code}\n"
        f"stdout:\n{out}\nstderr:\n{err}"
    )


def assert_clean(result: tuple[int, str, str], what: str) -> None:
    code, out, err = result
    assert code == 0, f"{what}: returncode {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "crash injected" not in err, err
    assert "Traceback" not in err, f"{what} logged an exception:\n{err}"


class CrashHarness:
    """Crash, recover, check, follow up: the shape of every crash test."""

    def __init__(
        self,
        store_url: str,
        workdir: Path,
        *,
        invocation_budget: float | None = None,
        max_attempts: int | None = None,
        timeout: float = PROCESS_TIMEOUT_S,
        provider: str = "inprocess",
        partial_every: float | None = None,
    ) -> None:
        self.store_url = store_url
        self.workdir = workdir
        # Passed to every run of the driver (the agent and runtime must be the same each time).
        self.invocation_budget = invocation_budget
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.provider = provider  # the model boundary: "inprocess", "openai", "anthropic"
        self.partial_every = partial_every
        self.outputs: list[str] = []

    def run(
        self,
        crash_at: str | None = None,
        scenario: str = "story",
        *,
        follow_up: bool = False,
        hostname: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> tuple[int, str, str]:
        result = run_to_rest(
            self.store_url,
            self.workdir,
            crash_at,
            scenario,
            follow_up=follow_up,
            invocation_budget=self.invocation_budget,
            max_attempts=self.max_attempts,
            hostname=hostname,
            timeout=self.timeout,
            provider=self.provider,
            partial_every=self.partial_every,
            extra_args=extra_args,
        )
        self.outputs.append(result[1])
        return result

    def crash(self, spec: str, scenario: str = "story") -> None:
        assert_crashed(self.run(spec, scenario), spec)

    def recover(self, scenario: str = "story") -> World:
        assert_clean(self.run(None, scenario), "the run to rest")
        world = self.world()
        assert_invariants(world, [STORY_REQUEST], sessions=1)
        return world

    def follow_up(self, scenario: str = "story") -> World:
        """The session accepts a next message and completes it."""
        assert_clean(self.run(None, scenario, follow_up=True), "the follow-up run")
        world = self.world()
        assert_invariants(world, [STORY_REQUEST, NEXT_REQUEST], sessions=1)
        nxt = world.submission(NEXT_REQUEST)
        assert nxt.status == "completed", nxt
        assert (nxt.result_text or "").startswith("Status: "), nxt.result_text
        assert world.task("read_state", NEXT_REQUEST).status == "completed"
        return world

    def crash_and_recover(self, *specs: str, scenario: str = "story") -> World:
        """SIGKILL at each of ``specs`` in turn, run to rest, check, follow up.

        Returns the at-rest world from before the follow-up, for the policy's own checks.
        """
        for spec in specs:
            self.crash(spec, scenario)
        world = self.recover(scenario)
        self.follow_up(scenario)
        return world

    def world(self) -> World:
        world = read_world(self.store_url, self.workdir)
        world.outputs = list(self.outputs)
        return world

    def read(self, body: Callable[[Any], T]) -> T:
        return read_store(self.store_url, body)

    def abort(self, session_id: str) -> list[str]:
        """Record an abort intent while no process runs the session (as ``POST /abort`` to
        another server would): the next run must honour it."""
        store = open_store(self.store_url)
        try:
            return Journal(store, SystemClock(), RandomIds()).request_abort(session_id)
        finally:
            store.close()
