"""The coding agent on worker pools: set a harness up for it, drive its turn (approving each
permission prompt, as a person would, from another process on the workers' queue), and check
what the turn leaves behind.

Shared by the RQ and the SQS coding agent tests (``test_rq_coding_agent.py``,
``test_sqs_coding_agent.py``); the harnesses are :mod:`worker_support`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from coding_agents import coding_agents
from crash_cases import REQUEST, SESSION
from worker_support import (
    HERE,
    WorkerHarness,
    WorkerProc,
    child_pids,
    parse_worker_pid,
    process_group_alive,
    wait_until,
)

import fxdurable as fx
from examples.coding_agent.task import CART, TASK, run_project_tests
from fxdurable import tools as fxt
from fxdurable.core.asking import waits_for_input
from fxdurable.core.records import SubmissionRecord
from fxdurable.core.subagent import child_request_id
from fxdurable.tools.fsfiles import regular_files
from tests.kit.world import SETTLED, World, assert_invariants, assert_model_requests

__all__ = [
    "DIRECTORY",
    "STORED",
    "CodingRun",
    "assert_fixed_once",
    "edit_recovered",
]

DIRECTORY = "directory"
STORED = "stored"
# How often the test reads the submission while it drives the turn. DynamoDB's moto serves
# one request at a time, workers' included: polling it every 50 ms made the SQS test's turn
# take 29 s instead of 17 s.
POLL_S = 0.05
DYNAMO_POLL_S = 0.2
# The cart's two fixes as the policy makes them: each must be in the file, once.
FIXED_LINES = (
    "return sum(unit_price * qty for _item, unit_price, qty in self.lines)",
    "return round(self.subtotal() * (1 - self.discount_percent / 100), 2)",
)
# How long the test run a test kills a worker in lasts (a sleep instead of the tests: the kill
# comes as soon as it runs).
SLOW_RUN_S = 30


class CodingRun:
    """The coding agent served by ``h``'s workers on ``workspace`` (``stored``:
    ``FXD_CODING_WORKSPACE=stored``; or ``directory``: the example's directory workspace under
    ``FXD_CODING_DIR`` in the harness's root, shared by its workers, as workers on one host
    can), and the one coding task submitted to them."""

    def __init__(self, h: WorkerHarness, workspace: str = STORED) -> None:
        self.h = h
        self.workspace = workspace
        if workspace == STORED:
            chosen = {"FXD_CODING_WORKSPACE": STORED}
        else:  # the example's directory workspace: FXD_CODING_DIR/workspace
            chosen = {"FXD_CODING_DIR": str(h.root / "coding")}
            self.root = h.root / "coding" / "workspace"
        # ``python3`` in the agent's shell: this interpreter, through a shim that only sleeps
        # on the run after slow_next_test_run(). (The shell keeps PATH; it drops FXD_*.) The
        # sleep is the shim's child, as a test runner's workers are its children: not a
        # process the shell tool started itself.
        bin_dir = h.root / "bin"
        bin_dir.mkdir()
        # The workers' TMPDIR, where a stored workspace's shell makes its scratch directories.
        self.tmp = h.root / "tmp"
        self.tmp.mkdir()
        self.marker = h.root / "slow-next-test-run"
        shim = bin_dir / "python3"
        shim.write_text(
            "#!/bin/sh\n"
            f'if rm "{self.marker}" 2>/dev/null; then sleep {SLOW_RUN_S}; exit 1; fi\n'
            f'exec "{sys.executable}" "$@"\n'
        )
        shim.chmod(0o755)
        path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
        h.use_agents(
            HERE / "coding_agents.py",
            lambda: coding_agents(h.world_dir),
            env={**chosen, "PATH": path, "TMPDIR": str(self.tmp)},
        )
        self.sub_id = ""
        self.answered = 0

    def slow_next_test_run(self) -> None:
        self.marker.touch()

    def submit(self) -> str:
        self.sub_id = self.h.submit_one(SESSION, TASK, REQUEST)
        return self.sub_id

    def submission(self) -> SubmissionRecord:
        return self.h.read(lambda v: v.get_submission(self.sub_id))

    def settled_at(self) -> float:
        return self.submission().settled_at or 0.0

    def drive(self, until: Callable[[], object] | None = None, timeout: float = 60.0) -> object:
        """Approve each question the turn asks (``session.answer(fx.allow())`` from a runtime
        on the workers' queue, which enqueues the wake) until ``until()`` is truthy (returned)
        or the turn settles."""

        h = self.h
        poll_s = DYNAMO_POLL_S if h.store_url.startswith("dynamodb://") else POLL_S

        async def go() -> object:
            async with fx.Runtime(h.agents(), store=h.store_url, queue=h.queue_url) as rt:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout
                while loop.time() < deadline:
                    sub = self.submission()
                    if sub.status in SETTLED:
                        return None
                    if waits_for_input(sub):
                        await rt.session(SESSION).answer(fx.allow())
                        self.answered += 1
                        continue
                    found = until() if until is not None else None
                    if found:
                        return found
                    await asyncio.sleep(poll_s)
            raise AssertionError(f"the coding turn did not settle within {timeout:g}s")

        try:
            return asyncio.run(go())
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.h.diagnostics()}") from None

    def shell_running(self) -> tuple[WorkerProc, int] | None:
        """The worker whose process runs the coder's ``shell`` command now, and the command's
        process group; None until the command runs: the slow run's shim has taken its marker
        (a kill before that would leave it to slow the next run down instead)."""
        if self.marker.exists():
            return None
        events = self.h.events(SESSION)
        if not any(e.type == "tool.started" and e.data.get("tool") == "shell" for e in events):
            return None
        attempt = [e for e in events if e.type == "attempt.started"][-1]
        pid = parse_worker_pid(attempt.data.get("worker"))  # an RQ horse, or an SQS worker
        commands = child_pids(pid)
        worker = next((w for w in self.h.workers if pid in (w.pid, *w.horses())), None)
        return (worker, commands[0]) if worker is not None and commands else None

    def kill_while_shell_runs(self) -> WorkerProc:
        """Once the coder's ``shell`` runs the (slow) tests, SIGKILL the worker running it,
        whole (an RQ worker's horse and parent); the command dies too, with everything it
        started (the shell tool's supervisor kills its process group). Returns the worker."""
        running = self.drive(until=self.shell_running)
        assert isinstance(running, tuple)
        worker, group = running
        worker.kill()
        wait_until(lambda: not process_group_alive(group), 10, "the test run to die")
        return worker

    def check_shell_recovered(self, world: World) -> None:
        """After :meth:`kill_while_shell_runs`: the unsafe call was recorded
        ``outcome_unknown``, never re-run; the repeat the model asked for at once was refused
        as blind (never asked about); it asked again, deliberately, was asked, and the tests
        ran, failing then passing."""
        assert world.submission(REQUEST).interruptions == 1
        shells = [(t.status, t.runs) for t in world.tasks_of("shell", REQUEST)]
        assert shells == [
            ("outcome_unknown", 1),
            ("refused", 0),
            ("completed", 1),
            ("completed", 1),
        ]
        assert self.answered == 3  # the killed test run, its deliberate repeat, the final run

    def export(self, where: Path) -> dict[str, bytes]:
        """Write the session's workspace into ``where`` (a new directory) and return its files:
        a stored one through ``fxdurable workspace export``, as a user would; a directory
        one copied from the workers' shared directory."""
        if self.workspace == STORED:
            code, out, err = self.h.run_cli(
                "workspace", "export", SESSION, str(where), "--store", self.h.store_url
            )
            assert code == 0, (code, out, err)
        else:
            shutil.copytree(fxt.directory(self.root).session_dir(SESSION), where)
        return {p: (where / p).read_bytes() for p in regular_files(where)}

    def project_tests(self, where: Path) -> str:
        """The output of the project's tests, run in ``where`` (they must pass)."""
        done = run_project_tests(where)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stderr

    def check(self, where: Path) -> World:
        """Every worker stopped: the turn completed with both fixes applied once each, the
        workspace read back passes the project's tests, the store passes the invariant
        checks (the suites' and ``fxdurable check --at-rest``)."""
        h = self.h
        codes = h.stop_workers()
        assert codes == [0] * len(codes), (codes, h.diagnostics())
        # The story's effect log is not kept here (check_effects would find every completed
        # call's effect missing): the coder's effects are its files, checked below.
        world = dataclasses.replace(h.world(), effect_violations=[])
        sub = world.submission(REQUEST)
        assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
        assert (sub.result_text or "").startswith("All 6 tests pass"), sub.result_text
        children = [child_request_id(t.execution_id) for t in world.tasks_of("explore", REQUEST)]
        assert len(children) == 1, children
        assert_invariants(world, [REQUEST, *children])
        assert_model_requests(world)
        files = self.export(where / "workspace")
        assert_fixed_once(world, files[CART].decode())
        output = self.project_tests(where / "workspace")
        assert output.rstrip().endswith("OK") and "Ran 6 tests" in output, output
        code, out, err = h.run_cli("check", "--at-rest", "--store", h.store_url)
        assert code == 0, (code, out, err)
        # Every shell removed its scratch copy, or the next one did for a killed worker.
        assert not list(self.tmp.glob("fxd-ws-*")), list(self.tmp.iterdir())
        return world


def assert_fixed_once(world: World, cart: str) -> None:
    """Each fix of the cart is in it once, and was made by one ``edit_file`` call that
    completed (none failed: a fix applied twice would fail its second call as old text not
    found, and the policy would read and try again)."""
    for line in FIXED_LINES:
        assert cart.count(line) == 1, cart
    edits = world.tasks_of("edit_file", REQUEST)
    assert [t.status for t in edits] == ["completed", "completed"], [
        (t.status, t.result) for t in edits
    ]
    assert len({t.execution_id for t in edits}) == 2


def edit_recovered(world: World, *, applied_before: bool) -> None:
    """The edit the worker died after (its function ran, its result unrecorded) was run again
    by a new attempt with the same execution id, and says whether it found itself applied:
    a directory workspace's ledger does; a stored workspace's write commits with the result,
    so the first run applied nothing and the second applies it."""
    (task,) = [t for t in world.tasks_of("edit_file", REQUEST) if t.runs > 1]
    assert task.runs == 2, task
    again = "(already applied; not applied again)" in (task.result or "")
    assert again == applied_before, task.result
    reasons = [e.data.get("reason") for e in world.task_events(task, "tool.started")]
    assert reasons == [None, "recovery"], reasons
