"""Exporting a stored workspace to a directory: ``fxt.export_workspace(store, session, dir)``
and ``fxdurable workspace export SESSION DIR --db/--store``, on a session a real Runtime ran
(SQLite). The worker pools' use of it is in tests/workers/test_rq_coding_agent.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.backends import open_store
from fxdurable.core.store import Store
from fxdurable.errors import SessionNotFoundError, WorkspaceError
from tests.runtime.fxrt_support import FAST, fresh_store, run
from tests.tools.test_stored_workspace import scripted

EXPECTED = {
    "src/calc.py": b"def add(a, b):\n    return a + b\n",
    "notes/todo.txt": b"ship it",
}


@pytest.fixture(name="store")
def worked_session(tmp_path: Path) -> Iterator[Store]:
    """Session ``s1`` edited, wrote and deleted files of its template through a lead agent,
    and asked an explore subagent (session ``s1``'s child) to read one; ``s2`` used no
    workspace."""
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (template / "old.txt").write_text("to be deleted\n")
    ws = fxt.stored(template)
    explorer = fx.Agent(
        "explorer",
        scripted(
            {"read calc": [fx.reply("", fx.call("read_file", path="src/calc.py")), fx.reply("ok")]}
        ),
        tools=fxt.read_only_tools(ws),
    )
    lead = fx.Agent(
        "lead",
        scripted(
            {
                "work": [
                    fx.reply(
                        "", fx.call("edit_file", path="src/calc.py", old_text="-", new_text="+")
                    ),
                    fx.reply("", fx.call("write_file", path="notes/todo.txt", content="ship it")),
                    fx.reply("", fx.call("shell", command="rm old.txt")),
                    fx.reply("", fx.call("explore", task="read calc")),
                    fx.reply("done"),
                ],
                "hello": [fx.reply("hi")],
            }
        ),
        tools=[*fxt.workspace_tools(ws), fx.subagent(explorer, name="explore", description="x")],
    )
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([lead], store=store, settings=FAST) as rt:
            assert await rt.session("s1").run("work", timeout=20) == "done"
            assert await rt.session("s2").run("hello", timeout=20) == "hi"

    run(main())
    reopened = open_store(store.url)
    try:
        yield reopened
    finally:
        reopened.close()


def tree(where: Path) -> dict[str, bytes]:
    return {
        p.relative_to(where).as_posix(): p.read_bytes() for p in where.rglob("*") if p.is_file()
    }


def test_a_sessions_files_and_its_subagent_childs_are_its_committed_ones(
    tmp_path: Path, store: Store
) -> None:
    assert fxt.export_workspace(store, "s1", tmp_path / "out") == sorted(EXPECTED)
    assert tree(tmp_path / "out") == EXPECTED
    (child,) = [s.id for s in store.read(lambda v: v.list_sessions()) if s.parent_session]
    (tmp_path / "empty").mkdir()  # an empty directory will do
    assert fxt.export_workspace(store, child, tmp_path / "empty") == sorted(EXPECTED)
    assert tree(tmp_path / "empty") == EXPECTED


def test_what_cannot_be_exported_says_why_and_writes_nothing(tmp_path: Path, store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        fxt.export_workspace(store, "nope", tmp_path / "a")
    with pytest.raises(WorkspaceError, match="'s2' has no stored workspace files"):
        fxt.export_workspace(store, "s2", tmp_path / "b")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep")
    with pytest.raises(WorkspaceError, match="is not an empty directory"):
        fxt.export_workspace(store, "s1", taken)
    assert tree(taken) == {"mine.txt": b"keep"}
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_cli_exports_and_reports_errors_in_one_line(tmp_path: Path, store: Store) -> None:
    db = store.url.removeprefix("sqlite:///")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fxdurable", "workspace", "export", *args, "--db", db]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)

    done = cli("s1", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"exported 2 file(s) of session s1 to {tmp_path / 'out'}\n"
    assert tree(tmp_path / "out") == EXPECTED
    done = cli("s2", str(tmp_path / "other"))
    assert done.returncode == 2
    assert done.stderr.startswith("fxdurable: session 's2' has no stored workspace files")
