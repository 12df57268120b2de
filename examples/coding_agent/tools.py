"""The coding agent's own tools for the page: ``edit_file`` and ``write_file`` that record the
change they made as a unified diff in their result, and ``exit_plan_mode``.

The diff is made at the edit, from the file as it was just before it and as it is written, and
recorded with the call's result (and in the workspace's edit ledger with it): a console shows
that text, never a diff recomputed later from files that may have changed since. After a crash
the re-executed call finds its write applied and returns the recorded result, diff included.

Two knobs for a person or a test watching a crash, both off by default:
``FXD_CODING_PACE_S`` (seconds an edit waits before writing: time to press the crash button)
and ``FXD_CODING_GATE`` (a directory: each edit announces itself there, ``<tool>.arrived.<execution
id>``, and waits for the file ``<tool>.open`` before writing; tests hold an edit open with it).
"""

from __future__ import annotations

import difflib
import os
import threading
import time
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.runtime.tool_kinds import with_kind
from fxdurable.tools.file_tools import EditFileInput, WriteFileInput, edited
from fxdurable.tools.paths import confine
from fxdurable.tools.workspace import ALREADY_APPLIED, Change, Workspace

from .settings import SessionSettings

__all__ = [
    "EXIT_PLAN_MODE",
    "PLAN_APPROVED",
    "diffing_edit_tools",
    "exit_plan_mode_tool",
    "unified_diff",
]

EXIT_PLAN_MODE = "exit_plan_mode"
PLAN_APPROVED = "The user approved the plan; plan mode is off. Carry it out now."
_GATE_POLL_S = 0.02


def unified_diff(path: str, before: bytes | None, after: bytes) -> str:
    """``before`` -> ``after`` as a unified diff of ``path`` (3 lines of context); a new file
    diffs from ``/dev/null``. A last line without a newline is marked as ``diff`` marks it."""
    old = [] if before is None else _lines(before.decode("utf-8", "replace"))
    new = _lines(after.decode("utf-8", "replace"))
    lines = difflib.unified_diff(
        old, new, fromfile="/dev/null" if before is None else f"a/{path}", tofile=f"b/{path}"
    )
    return "".join(lines).rstrip("\n")


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _with_diff(path: str, before: bytes | None, change: Change) -> Change:
    diff = unified_diff(path, before, change.after)
    return Change(change.after, f"{change.result}\n{diff}" if diff else change.result)


def _summary_first(result: str) -> str:
    """A re-executed call's recorded result: the ledger appends :data:`ALREADY_APPLIED` at the
    end, inside the diff; it belongs to the summary line, before the diff."""
    if not result.endswith(ALREADY_APPLIED):
        return result
    summary, newline, diff = result.removesuffix(ALREADY_APPLIED).partition("\n")
    return summary + ALREADY_APPLIED + newline + diff


def _hold(tool: str, ctx: fx.ToolContext) -> None:
    """The pace and the test gate of the module's docstring (no-ops unless configured)."""
    gate = os.environ.get("FXD_CODING_GATE")
    if gate:
        where = Path(gate)
        (where / f"{tool}.arrived.{ctx.execution_id}.{os.getpid()}").touch()
        opened = where / f"{tool}.open"
        while not opened.exists() and not ctx.cancelled.is_set():
            time.sleep(_GATE_POLL_S)
    pace = float(os.environ.get("FXD_CODING_PACE_S") or 0)
    if pace > 0:
        threading.Event().wait(pace)


def diffing_edit_tools(workspace: Workspace) -> list[fx.Tool]:
    """``edit_file`` and ``write_file`` as ``fxdurable.tools`` has them (the same inputs,
    checks and ledger), whose results carry the unified diff of what they changed."""

    def edit_file(inp: EditFileInput, ctx: fx.ToolContext) -> str:
        path = confine(inp.path)
        _hold("edit_file", ctx)
        return _summary_first(
            workspace.open(ctx).apply_edit(
                path,
                lambda before: _with_diff(path, before, edited(inp, path, before)),
                execution_id=ctx.execution_id,
            )
        )

    def write_file(inp: WriteFileInput, ctx: fx.ToolContext) -> str:
        path = confine(inp.path)
        data = inp.content.encode("utf-8")
        _hold("write_file", ctx)
        change = Change(data, f"wrote {path} ({len(data)} bytes)")
        return _summary_first(
            workspace.open(ctx).apply_edit(
                path, lambda before: _with_diff(path, before, change), execution_id=ctx.execution_id
            )
        )

    return [
        with_kind(
            fx.define_tool(
                "edit_file",
                description=(
                    "Replace exact text in a workspace file. old_text must occur exactly once "
                    "(or set replace_all); read the file first. Answers with the diff."
                ),
                input_model=EditFileInput,
                execute=edit_file,
                replay="idempotent",
            ),
            "diff",
        ),
        with_kind(
            fx.define_tool(
                "write_file",
                description="Create or overwrite a workspace file (parent directories are "
                "created). Answers with the diff.",
                input_model=WriteFileInput,
                execute=write_file,
                replay="idempotent",
            ),
            "diff",
        ),
    ]


class PlanInput(pydantic.BaseModel):
    plan: str = pydantic.Field(description="your plan, in a few markdown lines")


def exit_plan_mode_tool(settings: SessionSettings) -> fx.Tool:
    """Called by the model in plan mode with its plan. The permission hook asks the person
    to approve it first (the approval is an answer, recorded); the call, once allowed, turns
    plan mode off and keeps the plan in the session's state. Idempotent: a re-execution turns
    off what is off and writes the same plan."""

    def exit_plan_mode(inp: PlanInput, ctx: fx.ToolContext) -> str:
        settings.set_plan_mode(ctx.session_id, False)
        ctx.state["plan"] = {"text": inp.plan, "approved": True}
        return PLAN_APPROVED

    return with_kind(
        fx.define_tool(
            EXIT_PLAN_MODE,
            description="In plan mode (changing tools refused): present your plan to the "
            "user for approval. Once approved, plan mode is off and you carry it out.",
            input_model=PlanInput,
            execute=exit_plan_mode,
            replay="idempotent",
        ),
        "plan",
    )
