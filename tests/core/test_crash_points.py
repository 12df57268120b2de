"""Named crash points: ``FXD_CRASH_AT=<point>[:<tool>]`` SIGKILLs the process exactly there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fxdurable.core.crash import CRASH_POINTS, crash_point
from fxdurable.core.states import SubmissionStatus
from fxdurable.stores.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]

# DESIGN.md §5: "At least" these.
REQUIRED_POINTS = {
    "submission.after-admit",
    "model.before-request",
    "model.mid-stream",
    "model.after-finish",
    "tool.after-intent",
    "tool.after-execute",
    "tool.after-record",
    "turn.in-commit",
    "continuation.before-enqueue",
    "continuation.after-enqueue",
    "recovery.after-claim",
    "hook.before-tool",
    "subagent.in-child",
    "steer.after-record",
    "abort.after-intent",
}


def run(code: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FXD_CRASH_AT"}
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


SCRIPT = """
    from fxdurable.core.crash import crash_point
    for point, tool in {calls}:
        crash_point(point, tool)
        print("survived", point, tool, flush=True)
    print("done", flush=True)
"""


def crash_script(*calls: tuple[str, str | None]) -> str:
    return SCRIPT.format(calls=list(calls))


def test_every_required_point_is_named() -> None:
    assert REQUIRED_POINTS <= CRASH_POINTS


@pytest.mark.crash
def test_crash_point_kills_with_sigkill() -> None:
    result = run(crash_script(("tool.after-intent", None)), "model.after-finish")
    assert result.returncode == 0, result.stderr  # another point: no crash
    assert "done" in result.stdout

    result = run(
        crash_script(("submission.after-admit", None), ("model.after-finish", None)),
        "model.after-finish",
    )
    assert result.returncode == -signal.SIGKILL
    assert "crash injected at model.after-finish" in result.stderr
    # It died exactly there: the point before it ran, nothing after it did.
    assert "survived submission.after-admit" in result.stdout
    assert "survived model.after-finish" not in result.stdout
    assert "done" not in result.stdout


@pytest.mark.crash
def test_no_crash_without_the_variable() -> None:
    result = run(crash_script(*((p, None) for p in sorted(CRASH_POINTS))), None)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert "crash injected" not in result.stderr


@pytest.mark.crash
def test_tool_filter_fires_only_for_that_tool() -> None:
    result = run(
        crash_script(
            ("tool.after-execute", None),
            ("tool.after-execute", "read_file"),
            ("tool.after-intent", "shell"),  # right tool, wrong point
            ("tool.after-execute", "shell"),
            ("tool.after-execute", "never"),
        ),
        "tool.after-execute:shell",
    )
    assert result.returncode == -signal.SIGKILL
    assert "crash injected at tool.after-execute:shell" in result.stderr
    assert "survived tool.after-execute None" in result.stdout
    assert "survived tool.after-execute read_file" in result.stdout
    assert "survived tool.after-intent shell" in result.stdout
    assert "survived tool.after-execute shell" not in result.stdout


@pytest.mark.crash
def test_point_without_a_tool_filter_fires_for_any_tool() -> None:
    result = run(crash_script(("tool.after-record", "write_file")), "tool.after-record")
    assert result.returncode == -signal.SIGKILL
    assert "crash injected at tool.after-record:write_file" in result.stderr


@pytest.mark.parametrize("name", ["", "nope", "tool.after_intent", "TOOL.AFTER-INTENT"])
def test_unknown_point_names_raise(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in a crash point name must fail loudly, not silently never crash."""
    monkeypatch.delenv("FXD_CRASH_AT", raising=False)
    with pytest.raises(ValueError, match="unknown crash point"):
        crash_point(name)
    monkeypatch.setenv("FXD_CRASH_AT", name or "x")
    with pytest.raises(ValueError, match="unknown crash point"):
        crash_point(name, "shell")


@pytest.mark.crash
def test_crash_in_commit_leaves_nothing_of_the_settle(tmp_path: Path) -> None:
    """``turn.in-commit`` fires inside the settle transaction: none of it becomes durable."""
    db = tmp_path / "c.db"
    code = f"""
        from fxdurable.core.clock import RandomIds
        from fxdurable.core.journal import Journal, WorkerIdentity
        from fxdurable.stores.sqlite import SqliteStore

        class Clock:
            def now(self):
                return 1000.0

        j = Journal(SqliteStore("sqlite:///{db}"), Clock(), RandomIds())
        sub = j.admit("s1", agent="agent", prompt="x").submission
        fence = j.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
        j.begin_attempt(fence, sub.id, worker="w")
        print("settling", flush=True)
        j.settle(fence, sub.id, "completed", text="done")
        print("settled", flush=True)
    """
    result = run(code, "turn.in-commit")
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "crash injected at turn.in-commit" in result.stderr
    assert "settling" in result.stdout and "settled" not in result.stdout

    store = SqliteStore(f"sqlite:///{db}")
    try:
        (sub,) = store.read(lambda r: r.submissions("s1"))
        assert sub.status is SubmissionStatus.RUNNING
        assert sub.settled_at is None
        events = store.read(lambda r: r.events("s1"))
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert "submission.completed" not in [e.type for e in events]
    finally:
        store.close()
