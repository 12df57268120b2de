"""Helpers of the workspace tool tests (imported as a plain module: tests/tools is on sys.path).

A tool is called the way the runtime calls it (``await tool.run(input, ctx)``), with a
:class:`~fxdurable.ToolContext` built here; the runtime tests (``test_ws_runtime.py``) drive
the same tools through a real :class:`fxdurable.Runtime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import fxdurable as fx
from fxdurable import tools as fxt


def context(session_id: str = "s1", execution_id: str = "x1", **fields: Any) -> fx.ToolContext:
    return fx.ToolContext(
        execution_id=execution_id, session_id=session_id, tool_name="test", attempt=1, **fields
    )


def tools_of(workspace: fxt.Workspace, **options: Any) -> dict[str, fx.Tool]:
    return {tool.name: tool for tool in fxt.workspace_tools(workspace, **options)}


def call(tool: fx.Tool, ctx: fx.ToolContext | None = None, **arguments: Any) -> str:
    """Run ``tool`` once with ``arguments``; its exception propagates."""
    parsed = tool.input_model.model_validate(arguments)
    return asyncio.run(tool.run(parsed, ctx or context()))


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its parent to reap it counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def until(condition: Any, what: str, limit: float = 10.0) -> None:
    """Poll ``condition()`` until true; fail (naming ``what``) after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


def wait_until(condition: Any, what: str, limit: float = 10.0) -> None:
    asyncio.run(until(condition, what, limit))


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def kill_quietly(pids: list[int]) -> None:
    """Clean up the ``sleep 100`` processes these tests start, if a test failed before they
    were killed. Only a pid still running ``sleep``: a pid the test already saw gone may have
    been handed to another process since (pids wrap, within minutes when suites run side by
    side), and a SIGKILL there would take down whatever holds it now, a pytest worker too."""
    for pid in pids:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue  # gone (or no /proc: nothing to clean up that we can be sure of)
        if Path(argv0.decode(errors="replace")).name != "sleep":
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
