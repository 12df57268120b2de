"""The workspace tools inside a real Runtime (embedded SQLite, scripted models): the policies
each call is recorded with, errors the model reads, a subagent child on its parent's files,
the shell's progress while it runs and an abort that kills its process group."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ws_support import gone, kill_quietly, pids_in, until

import fxdurable as fx
from fxdurable import tools as fxt
from tests.runtime.fxrt_support import FAST, check_invariants, fresh_store, read, run, tasks


def task_rows(rt: fx.Runtime, session_id: str) -> list[tuple[str, str, str, str]]:
    rows = []
    for sub in read(rt, lambda v: v.submissions(session_id)):
        rows += [(t.tool, t.policy, t.status.value, t.result or "") for t in tasks(rt, sub.id)]
    return rows


def test_a_turn_reads_edits_and_runs_with_each_calls_policy_and_readable_errors(tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    ws = fxt.directory(tmp_path / "ws", template=template)
    model = fx.ScriptedModel(
        [
            fx.reply("", fx.call("read_file", path="calc.py"), fx.call("read_file", path="../x")),
            fx.reply("", fx.call("edit_file", path="calc.py", old_text="a * b", new_text="")),
            fx.reply("", fx.call("edit_file", path="calc.py", old_text="-", new_text="+")),
            fx.reply(
                "", fx.call("shell", command="python3 -c 'import calc; print(calc.add(2, 3))'")
            ),
            fx.reply("fixed"),
        ]
    )
    agent = fx.Agent("coder", model, tools=fxt.workspace_tools(ws))

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run("fix calc", timeout=20) == "fixed"
            assert task_rows(rt, "s1") == [
                (
                    "read_file",
                    "safe",
                    "completed",
                    "     1\tdef add(a, b):\n     2\t    return a - b",
                ),
                (
                    "read_file",
                    "safe",
                    "failed",
                    "PathRefusedError: path refused: '../x': '..' leads out of the workspace; "
                    "give a path relative to the workspace root, e.g. 'src/app.py'",
                ),
                (
                    "edit_file",
                    "idempotent",
                    "failed",
                    "EditError: old_text not found in calc.py; read the file again and copy "
                    "the text exactly (whitespace and indentation included)",
                ),
                ("edit_file", "idempotent", "completed", "edited calc.py: replaced 1 occurrence"),
                ("shell", "unsafe", "completed", "exit code: 0\n5\n"),
            ]
            await check_invariants(rt, "s1")

    run(main())
    assert [t.reuse for t in fxt.read_only_tools(ws)] == [False, False, False]


def test_a_subagent_child_reads_its_parents_files(tmp_path):
    ws = fxt.directory(tmp_path / "ws")
    explorer = fx.Agent(
        "explorer",
        fx.ScriptedModel(
            [
                fx.reply(
                    "", fx.call("grep_files", pattern="TODO"), fx.call("glob_files", pattern="**")
                ),
                fx.reply("found it"),
            ]
        ),
        tools=fxt.read_only_tools(ws),
    )
    explore = fx.subagent(explorer, name="explore", description="Look around the files.")
    parent = fx.Agent(
        "lead",
        fx.ScriptedModel(
            [
                fx.reply("", fx.call("write_file", path="notes/todo.md", content="TODO: ship\n")),
                fx.reply("", fx.call("explore", task="find the TODOs")),
                fx.reply("done"),
            ]
        ),
        tools=[*fxt.workspace_tools(ws, shell=False), explore],
    )

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("p1").run("look", timeout=20) == "done"
            [(_, _, _, child_id)] = [
                (t.tool, t.status, t.result, t.child_session)
                for sub in read(rt, lambda v: v.submissions("p1"))
                for t in tasks(rt, sub.id)
                if t.tool == "explore"
            ]
            assert child_id is not None
            assert [row[3] for row in task_rows(rt, child_id)] == [
                "notes/todo.md:1:TODO: ship",
                "notes/todo.md",
            ]

    run(main())
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == [".fxdurable", "p1"]


@contextlib.asynccontextmanager
async def running_shell(tmp_path: Path, command: str) -> AsyncIterator[tuple[fx.Runtime, Any, str]]:
    """A runtime whose session s1 runs ``command`` in the shell: the runtime, the session and
    its submission's id, while the command runs."""
    ws = fxt.directory(tmp_path / "ws")
    model = fx.ScriptedModel([fx.reply("", fx.call("shell", command=command)), fx.reply("ran")])
    agent = fx.Agent("runner", model, tools=fxt.workspace_tools(ws))
    async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
        session = rt.session("s1")
        yield rt, session, (await session.submit("run it")).id


def test_the_shells_output_is_the_running_tasks_progress(tmp_path):
    go = tmp_path / "ws" / "s1" / "go"
    command = "echo started; while [ ! -f go ]; do sleep 0.02; done; echo finished"

    async def main() -> None:
        async with running_shell(tmp_path, command) as (rt, session, sub_id):
            while True:
                running = await session.running_task()
                if running is not None and "started" in (running.progress or ""):
                    break
                await asyncio.sleep(0.02)
            go.touch()
            await session.wait(sub_id, timeout=20)
            assert await session.running_task() is None
            [completed] = [e for e in await session.events() if e.type == "tool.completed"]
            done = await session.task(completed.data["task"])
            assert done is not None and done.result == "exit code: 0\nstarted\nfinished\n"
            await check_invariants(rt, "s1")

    run(main())


def test_an_abort_kills_the_shells_process_group(tmp_path):
    pids = tmp_path / "ws" / "s1" / "pids"
    command = "sleep 100 & echo $! > pids; sh -c 'echo $$ >> pids; exec sleep 100'"

    async def main() -> None:
        async with running_shell(tmp_path, command) as (rt, session, sub_id):
            await until(lambda: len(pids_in(pids)) == 2, "both sleeps started")
            assert not any(gone(pid) for pid in pids_in(pids))
            await session.abort()
            settled = await session.wait(sub_id, timeout=20)
            assert settled.status == "aborted"
            await until(lambda: all(gone(pid) for pid in pids_in(pids)), "both sleeps killed")
            await check_invariants(rt, "s1")

    try:
        run(main())
    finally:
        kill_quietly(pids_in(pids))
