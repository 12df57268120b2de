"""The stored workspace (``fxt.stored()``) inside a real Runtime on SQLite: files in the store
and the session state, shell write-back, parallel batches, forks, a subagent child, the state
bound. The real SIGKILLs and the other stores are in test_stored_workspace_processes.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import ModelRequest
from fxdurable.tools.stored_files import BASE_KEY
from fxdurable.tools.stored_workspace import BlobCache
from tests.runtime.fxrt_support import (
    FAST,
    check_invariants,
    fresh_store,
    last_user_text,
    read,
    rounds_done,
    run,
    tasks,
)


def scripted(turns: dict[str, Sequence[fx.ModelResponse]]) -> fx.ScriptedModel:
    """The prompt picks the list of replies; each round of the turn takes the next one."""

    def policy(request: ModelRequest) -> fx.ModelResponse:
        replies = turns[last_user_text(request)]
        return replies[min(rounds_done(request), len(replies) - 1)]

    return fx.ScriptedModel(policy)


def results(rt: fx.Runtime, session_id: str) -> list[tuple[str, str, str]]:
    """(tool, status, result) of every call of the session, in order."""
    rows = []
    for sub in read(rt, lambda v: v.submissions(session_id)):
        rows += [(t.tool, t.status.value, t.result or "") for t in tasks(rt, sub.id)]
    return rows


def state_of(rt: fx.Runtime, session_id: str) -> dict[str, Any]:
    record = read(rt, lambda v: v.get_session(session_id))
    assert record is not None
    return dict(record.state)


@dataclass
class Outcome:
    answers: list[str]  # each prompt's final answer, in order
    calls: list[tuple[str, str, str]]  # (tool, status, result) of every call
    state: dict[str, Any]  # the session's committed state
    files: dict[str, bytes]  # the session's files, as the store has them


def coder_session(
    tmp_path: Path, ws: fxt.StoredWorkspace, turns: dict[str, Sequence[fx.ModelResponse]]
) -> Outcome:
    """Session ``s1`` of a coder with ``ws``'s tools, sent each prompt of ``turns`` in turn;
    the invariants hold at rest."""
    agent = fx.Agent("coder", scripted(turns), tools=fxt.workspace_tools(ws))
    store = fresh_store(tmp_path)

    async def main() -> Outcome:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            answers = [await rt.session("s1").run(prompt, timeout=30) for prompt in turns]
            await check_invariants(rt, "s1")
            return Outcome(answers, results(rt, "s1"), state_of(rt, "s1"), ws.files_of(store, "s1"))

    return run(main())


@pytest.fixture
def template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "README.md").write_text("calc\n")
    (root / "old.txt").write_text("to be deleted\n")
    return root


def test_a_turn_reads_edits_writes_and_runs_shell_on_files_in_the_store(
    tmp_path: Path, template: Path
) -> None:
    ws = fxt.stored(template)
    shell = (
        "python3 -c 'import sys; sys.path.insert(0, \"src\"); import calc; print(calc.add(2, 3))'"
        " > out.txt && rm old.txt && ln -s README.md link && mkfifo pipe && echo more >> README.md"
    )
    done = coder_session(
        tmp_path,
        ws,
        {
            "fix": [
                fx.reply("", fx.call("read_file", path="src/calc.py")),
                fx.reply("", fx.call("edit_file", path="src/calc.py", old_text="-", new_text="+")),
                fx.reply("", fx.call("write_file", path="docs/notes/n.txt", content="note")),
                fx.reply("", fx.call("shell", command=shell)),
                fx.reply("", fx.call("glob_files", pattern="**")),
                fx.reply("done"),
            ]
        },
    )
    assert done.answers == ["done"]
    assert done.calls[:3] == [
        ("read_file", "completed", "     1\tdef add(a, b):\n     2\t    return a - b"),
        ("edit_file", "completed", "edited src/calc.py: replaced 1 occurrence"),
        ("write_file", "completed", "wrote docs/notes/n.txt (4 bytes)"),
    ]
    assert done.calls[3] == (
        "shell",
        "completed",
        "exit code: 0\n\n"
        "[workspace: 2 written back (README.md, out.txt); 1 deleted (old.txt)]\n"
        "[workspace: not kept: link (a symlink), pipe (a special file)]",
    )
    assert done.calls[4] == (
        "glob_files",
        "completed",
        "README.md\ndocs/notes/n.txt\nout.txt\nsrc/calc.py",
    )
    # The template is one manifest blob; only what changed has a key of its own.
    assert sorted(done.state) == [
        BASE_KEY,
        "fx.ws:README.md",
        "fx.ws:docs/notes/n.txt",
        "fx.ws:old.txt",
        "fx.ws:out.txt",
        "fx.ws:src/calc.py",
    ]
    assert done.state["fx.ws:old.txt"] is None  # deleted from the base
    assert done.files == {
        "README.md": b"calc\nmore\n",
        "docs/notes/n.txt": b"note",
        "out.txt": b"5\n",
        "src/calc.py": b"def add(a, b):\n    return a + b\n",
    }


def test_parallel_calls_writing_different_files_all_persist_and_the_same_file_fails_clearly(
    tmp_path: Path,
) -> None:
    done = coder_session(
        tmp_path,
        fxt.stored(),
        {
            "seed": [
                fx.reply(
                    "",
                    fx.call("write_file", path="a.txt", content="a0"),
                    fx.call("write_file", path="b.txt", content="b0"),
                    fx.call("write_file", path="c.txt", content="one two"),
                ),
                fx.reply("seeded"),
            ],
            "edit": [
                fx.reply(
                    "",
                    fx.call("edit_file", path="a.txt", old_text="a0", new_text="a1"),
                    fx.call("edit_file", path="b.txt", old_text="b0", new_text="b1"),
                    fx.call("edit_file", path="c.txt", old_text="one", new_text="ONE"),
                    fx.call("edit_file", path="c.txt", old_text="two", new_text="TWO"),
                ),
                fx.reply("edited"),
            ],
        },
    )
    assert fx.Agent("a", scripted({})).parallel_tools  # the default: one batch runs at once
    assert done.answers == ["seeded", "edited"]
    edits = [call for call in done.calls if call[0] == "edit_file"]
    assert [status for _, status, _ in edits[:2]] == ["completed", "completed"]
    assert sorted(status for _, status, _ in edits[2:]) == ["completed", "failed"], edits
    failed = next(result for _, status, result in edits[2:] if status == "failed")
    assert "c.txt is being changed by another call of this same batch" in failed
    assert done.files["a.txt"] == b"a1" and done.files["b.txt"] == b"b1"
    assert done.files["c.txt"] in (b"ONE two", b"one TWO")  # exactly one of the two changes


def test_a_fork_sees_the_files_of_its_point_and_keeps_its_changes_to_itself(
    tmp_path: Path, template: Path
) -> None:
    ws = fxt.stored(template)
    model = scripted(
        {
            "v1": [fx.reply("", fx.call("write_file", path="f.txt", content="v1")), fx.reply("ok")],
            "v2": [
                fx.reply("", fx.call("edit_file", path="f.txt", old_text="v1", new_text="v2")),
                fx.reply("ok"),
            ],
            "fork work": [
                fx.reply(
                    "",
                    fx.call("edit_file", path="f.txt", old_text="v1", new_text="forked"),
                    fx.call("write_file", path="g.txt", content="only in the fork"),
                ),
                fx.reply("ok"),
            ],
        }
    )
    agent = fx.Agent("coder", model, tools=fxt.workspace_tools(ws))
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            parent = rt.session("s1")
            first = await parent.submit("v1")
            await parent.wait(first.id, timeout=20)
            assert await parent.run("v2", timeout=20) == "ok"
            fork = await rt.fork("s1", "s2", after=first.id)
            assert await rt.session(fork.session_id).run("fork work", timeout=20) == "ok"
            await check_invariants(rt, "s2")

        assert ws.files_of(store, "s1")["f.txt"] == b"v2"
        forked = ws.files_of(store, "s2")
        assert forked["f.txt"] == b"forked"  # edited from v1: the file as of the fork point
        assert forked["g.txt"] == b"only in the fork"
        assert "g.txt" not in ws.files_of(store, "s1")
        assert forked["src/calc.py"] == (template / "src" / "calc.py").read_bytes()

    run(main())


def test_a_subagent_child_reads_its_root_sessions_files_and_cannot_write_them(
    tmp_path: Path,
) -> None:
    ws = fxt.stored()
    explorer = fx.Agent(
        "explorer",
        scripted(
            {
                "look at plan.txt": [
                    fx.reply(
                        "",
                        fx.call("read_file", path="plan.txt"),
                        fx.call("write_file", path="plan.txt", content="mine now"),
                        fx.call("shell", command="echo x > new.txt; cat plan.txt"),
                    ),
                    fx.reply("the plan says: step one"),
                ]
            }
        ),
        tools=[*fxt.read_only_tools(ws), fxt.write_file_tool(ws), fxt.shell_tool(ws)],
    )
    explore = fx.subagent(explorer, name="explore", description="reads the files")
    parent = fx.Agent(
        "lead",
        scripted(
            {
                "plan": [
                    fx.reply("", fx.call("write_file", path="plan.txt", content="step one")),
                    fx.reply("", fx.call("explore", task="look at plan.txt")),
                    fx.reply("done"),
                ]
            }
        ),
        tools=[*fxt.workspace_tools(ws), explore],
    )
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([parent], store=store, settings=FAST) as rt:
            assert await rt.session("s1").run("plan", timeout=20) == "done"
            children = [
                s.id for s in read(rt, lambda v: v.list_sessions()) if s.parent_session == "s1"
            ]
            assert len(children) == 1
            rows = results(rt, children[0])
            assert rows[0] == ("read_file", "completed", "     1\tstep one")
            assert rows[1][:2] == ("write_file", "failed")
            assert "subagent's child: it reads the files of session 's1'" in rows[1][2]
            assert rows[2][:2] == ("shell", "completed")
            assert rows[2][2].startswith("exit code: 0\nstep one")
            assert "1 changed files not kept" in rows[2][2]
            assert state_of(rt, children[0]) == {}  # the child wrote nothing of its own

        assert ws.files_of(store, "s1") == {"plan.txt": b"step one"}

    run(main())


def test_too_many_changed_files_fail_the_call_clearly_and_apply_nothing(tmp_path: Path) -> None:
    """Each changed path is a key of the session state (64 KB): past it, the call fails and
    the model reads why; none of the files is half-applied."""
    many = "for i in $(seq 1 900); do echo $i > generated_output_file_with_a_long_name_$i.txt; done"
    done = coder_session(
        tmp_path,
        fxt.stored(),
        {
            "generate": [
                fx.reply("", fx.call("shell", command=many)),
                fx.reply("", fx.call("glob_files", pattern="*.txt")),
                fx.reply("", fx.call("write_file", path="one.txt", content="fine")),
                fx.reply("done"),
            ]
        },
    )
    assert done.calls[0][:2] == ("shell", "failed")
    assert done.calls[0][2].startswith(
        "WorkspaceError: this change would leave 900 changed files recorded in the session's state"
    )
    assert "65536-byte bound; nothing was written" in done.calls[0][2]
    assert done.calls[1] == ("glob_files", "completed", "no files match *.txt")
    assert done.calls[2] == ("write_file", "completed", "wrote one.txt (4 bytes)")
    assert done.files == {"one.txt": b"fine"}


def test_the_blob_cache_is_bounded_by_bytes() -> None:
    cache = BlobCache(limit=10)
    cache.put("a", b"12345")
    cache.put("b", b"12345")
    assert cache.get("a") == b"12345"  # a is now the most recently used
    cache.put("c", b"123")
    assert cache.get("b") is None and cache.get("a") == b"12345" and cache.get("c") == b"123"
    cache.put("huge", b"x" * 11)  # larger than the whole cache: not kept, nothing dropped
    assert cache.get("huge") is None and cache.get("a") == b"12345"


def test_outside_a_runtime_the_stored_workspace_says_what_it_needs(template: Path) -> None:
    from ws_support import call, context

    read_file = fxt.read_file_tool(fxt.stored(template))
    with pytest.raises(ConfigurationError, match="keeps files in the runtime's store"):
        call(read_file, context(), path="README.md")
    with pytest.raises(ConfigurationError, match="not a directory"):
        fxt.stored(template / "README.md")
