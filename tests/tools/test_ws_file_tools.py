"""The file tools' answers and errors, and what the directory workspace does with sessions:
template seeding, one copy per session, safe directory names, an edit applied once per
execution id (its ledger), a subagent child's calls on the root session's files."""

from __future__ import annotations

import json
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ws_support import call, context, tools_of

from fxdurable import tools as fxt
from fxdurable.errors import ConfigurationError, EditError, WorkspaceError
from fxdurable.tools.directory_workspace import safe_name

APP = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture
def template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "app.py").write_text(APP)
    (root / "README.md").write_text("# demo\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    return root


@pytest.fixture
def tools(tmp_path: Path, template: Path) -> dict:
    return tools_of(fxt.directory(tmp_path / "ws", template=template))


def test_read_file_numbers_lines_and_says_where_it_stopped(tools):
    assert call(tools["read_file"], path="pkg/app.py", offset=2, limit=2) == (
        "     2\t    return a - b\n     3\t\n[... pkg/app.py has 6 lines; read more with offset=4]"
    )
    assert call(tools["read_file"], path="README.md") == "     1\t# demo"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "missing.py"}, "no such file: missing.py"),
        ({"path": "blob.bin"}, "blob.bin is a binary file, not text"),
        ({"path": "README.md", "offset": 5}, "README.md has 1 lines; offset 5 is past it"),
    ],
)
def test_read_file_errors_say_what_went_wrong(tools, arguments, message):
    with pytest.raises(WorkspaceError, match=message):
        call(tools["read_file"], **arguments)


def test_glob_files_lists_matching_paths_sorted(tools):
    assert call(tools["glob_files"], pattern="**/*.py") == "pkg/app.py"
    assert call(tools["glob_files"], pattern="*") == "README.md\nblob.bin"
    assert call(tools["glob_files"], pattern="**") == "README.md\nblob.bin\npkg/app.py"
    assert call(tools["glob_files"], pattern="*.rs") == "no files match *.rs"


def test_grep_files_answers_path_line_text(tools):
    assert call(tools["grep_files"], pattern=r"return a - b") == (
        "pkg/app.py:2:    return a - b\npkg/app.py:6:    return a - b"
    )
    assert call(tools["grep_files"], pattern="def", glob="*.py") == (
        "pkg/app.py:1:def add(a, b):\npkg/app.py:5:def sub(a, b):"
    )
    assert call(tools["grep_files"], pattern="def", glob="*.md") == "no matches for def"
    with pytest.raises(WorkspaceError, match=r"invalid regular expression '\(': missing \)"):
        call(tools["grep_files"], pattern="(")


def test_grep_files_stops_at_200_matches_and_says_so(tools):
    call(tools["write_file"], path="many.txt", content="hit\n" * 250)
    lines = call(tools["grep_files"], pattern="hit").splitlines()
    assert len(lines) == 201 and lines[-1].startswith("[... stopped at 200 matches")


def test_edit_file_replaces_a_unique_occurrence(tools, tmp_path):
    result = call(
        tools["edit_file"],
        path="pkg/app.py",
        old_text="def add(a, b):\n    return a - b",
        new_text="def add(a, b):\n    return a + b",
    )
    assert result == "edited pkg/app.py: replaced 1 occurrence"
    assert (tmp_path / "ws" / "s1" / "pkg" / "app.py").read_text() == APP.replace(
        "a - b", "a + b", 1
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"old_text": "a * b", "new_text": "x"}, "old_text not found in pkg/app.py; read"),
        (
            {"old_text": "return a - b", "new_text": "return a + b"},
            "old_text occurs 2 times in pkg/app.py; include more surrounding lines",
        ),
        ({"old_text": "a - b", "new_text": "a - b"}, "the same; nothing would change"),
        ({"old_text": "", "new_text": "x"}, "old_text is empty"),
        (
            {"path": "nope.py", "old_text": "a", "new_text": "b"},
            "no such file: nope.py; create it with write_file",
        ),
        ({"path": "blob.bin", "old_text": "a", "new_text": "b"}, "blob.bin is a binary file"),
    ],
)
def test_edit_file_errors_change_nothing(tools, tmp_path, arguments, message):
    with pytest.raises(EditError, match=message):
        call(tools["edit_file"], **({"path": "pkg/app.py"} | arguments))
    assert (tmp_path / "ws" / "s1" / "pkg" / "app.py").read_text() == APP


def test_edit_file_replace_all(tools):
    result = call(
        tools["edit_file"], path="pkg/app.py", old_text="a - b", new_text="b", replace_all=True
    )
    assert result == "edited pkg/app.py: replaced 2 occurrences"


def test_write_file_creates_directories_and_keeps_an_existing_files_mode(tools, tmp_path):
    assert call(tools["write_file"], path="a/b/c.txt", content="héllo") == (
        "wrote a/b/c.txt (6 bytes)"
    )
    home = tmp_path / "ws" / "s1"
    assert (home / "a" / "b" / "c.txt").read_text() == "héllo"
    os.chmod(home / "pkg" / "app.py", 0o755)
    call(tools["write_file"], path="pkg/app.py", content="#!/bin/sh\n")
    assert stat.S_IMODE(os.stat(home / "pkg" / "app.py").st_mode) == 0o755
    with pytest.raises(
        WorkspaceError, match=r"cannot write README\.md/x: a parent of it is a file"
    ):
        call(tools["write_file"], path="README.md/x", content="")


def test_an_edit_run_twice_with_one_execution_id_is_applied_once(tools, tmp_path):
    edit = {"path": "pkg/app.py", "old_text": "def sub", "new_text": "def subtract"}
    first = call(tools["edit_file"], context(execution_id="e1"), **edit)
    again = call(tools["edit_file"], context(execution_id="e1"), **edit)
    assert first == "edited pkg/app.py: replaced 1 occurrence"
    assert again == first + " (already applied; not applied again)"
    text = (tmp_path / "ws" / "s1" / "pkg" / "app.py").read_text()
    assert text.count("def subtract") == 1
    # A write too: the same execution id is detected; another one writes again.
    assert call(tools["write_file"], context(execution_id="w1"), path="n.txt", content="1")
    assert call(tools["write_file"], context(execution_id="w1"), path="n.txt", content="1") == (
        "wrote n.txt (1 bytes) (already applied; not applied again)"
    )


def test_an_edit_whose_ledger_was_written_but_file_not_replaced_is_applied_on_rerun(
    tools, tmp_path
):
    """What a crash between the ledger's write and the file's replace leaves: the entry,
    and the file as it was. The re-executed call applies the edit."""
    edit = {"path": "pkg/app.py", "old_text": "def sub", "new_text": "def subtract"}
    call(tools["edit_file"], context(execution_id="e2"), **edit)
    app = tmp_path / "ws" / "s1" / "pkg" / "app.py"
    app.write_text(APP)  # the file as it was before the replace
    [entry] = (tmp_path / "ws" / ".fxdurable" / "ledger" / "s1").iterdir()
    assert json.loads(entry.read_text())["path"] == "pkg/app.py"
    again = call(tools["edit_file"], context(execution_id="e2"), **edit)
    assert again == "edited pkg/app.py: replaced 1 occurrence"
    assert app.read_text().count("def subtract") == 1


def test_each_session_gets_its_own_copy_of_the_template(tools, tmp_path, template):
    call(tools["write_file"], context("s1"), path="pkg/app.py", content="changed")
    assert call(tools["read_file"], context("s2"), path="pkg/app.py").startswith("     1\tdef add")
    assert (template / "pkg" / "app.py").read_text() == APP
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == [".fxdurable", "s1", "s2"]
    assert list((tmp_path / "ws" / ".fxdurable" / "tmp").iterdir()) == []  # renamed into place


def test_a_session_without_a_template_starts_empty(tmp_path):
    tools = tools_of(fxt.directory(tmp_path / "ws"))
    assert call(tools["glob_files"], pattern="**") == "no files match **"


@pytest.mark.parametrize(
    ("session_id", "name"),
    [
        ("s1", "s1"),
        ("team/alpha", "team_alpha-" + "%s"),
        ("..", "_.-%s"),
        (".fxdurable", "_fxdurable-%s"),
        ("", "-%s"),
    ],
)
def test_session_ids_map_to_safe_directory_names(session_id, name):
    import hashlib

    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    assert safe_name(session_id) == (name % digest if "%s" in name else name)
    assert safe_name("a/b") != safe_name("a:b")


def test_a_session_id_with_a_slash_gets_a_directory_inside_the_root(tools, tmp_path):
    call(tools["write_file"], context("tenant/s1"), path="x.txt", content="x")
    [made] = [p for p in (tmp_path / "ws").iterdir() if p.name.startswith("tenant_s1-")]
    assert (made / "x.txt").read_text() == "x"


def test_sessions_opened_at_once_get_one_complete_copy(tmp_path, template):
    """Workers racing to open a new session each copy the template beside the session's
    directory; one rename wins, the others' copies are deleted, everyone uses the winner's."""
    ws = fxt.directory(tmp_path / "ws", template=template)
    start = threading.Barrier(8)

    def opened(_: int) -> list[str]:
        start.wait()
        return ws.open(context("new")).list()

    with ThreadPoolExecutor(8) as pool:
        listings = list(pool.map(opened, range(8)))
    assert listings == [["README.md", "blob.bin", "pkg/app.py"]] * 8
    assert list((tmp_path / "ws" / ".fxdurable" / "tmp").iterdir()) == []


def test_the_tool_lists_and_a_second_shell_under_another_name_and_policy(tmp_path):
    ws = fxt.directory(tmp_path / "ws")
    assert [(t.name, t.replay) for t in fxt.workspace_tools(ws, shell_replay="safe")] == [
        ("read_file", "safe"),
        ("glob_files", "safe"),
        ("grep_files", "safe"),
        ("edit_file", "idempotent"),
        ("write_file", "idempotent"),
        ("shell", "safe"),
    ]
    assert [t.name for t in fxt.workspace_tools(ws, shell=False)][-1] == "write_file"
    tests = fxt.shell_tool(ws, name="run_tests", replay="safe", timeout_s=5, description="Tests.")
    assert (tests.name, tests.replay, tests.description) == ("run_tests", "safe", "Tests.")
    assert call(tests, command="echo ok") == "exit code: 0\nok\n"


def test_outside_a_runtime_a_call_works_on_its_own_sessions_files():
    assert fxt.workspace_session(context("child-1")) == "child-1"


@pytest.mark.parametrize(
    "options", [{"timeout_s": 0}, {"output_limit": 0}, {"timeout_s": float("nan")}]
)
def test_a_shell_without_a_positive_timeout_or_limit_is_refused(tmp_path, options):
    with pytest.raises(ConfigurationError, match="shell tool 'shell': timeout_s must be"):
        fxt.shell_tool(fxt.directory(tmp_path), **options)


def test_a_template_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="is not a directory"):
        fxt.directory(tmp_path / "ws", template=tmp_path / "missing")


def test_an_edit_of_a_crlf_file_keeps_its_line_endings(tools, tmp_path):
    """read_file shows a CRLF file's lines without their \\r, so the model's multi-line
    old_text has bare \\n: it is matched in the file's endings, and new_text written in them."""
    home = tmp_path / "ws" / "s1"
    call(tools["read_file"], path="README.md")  # seeds the session's copy
    (home / "win.txt").write_bytes(b"first\r\nsecond\r\nthird\r\n")
    shown = call(tools["read_file"], path="win.txt")
    assert "\r" not in shown
    result = call(tools["edit_file"], path="win.txt", old_text="first\nsecond", new_text="1\n2")
    assert result == "edited win.txt: replaced 1 occurrence"
    assert (home / "win.txt").read_bytes() == b"1\r\n2\r\nthird\r\n"
    # A file of mixed endings is matched as it is: the texts are not rewritten.
    (home / "mixed.txt").write_bytes(b"a\r\nb\nc\n")
    with pytest.raises(EditError, match=r"old_text not found in mixed\.txt"):
        call(tools["edit_file"], path="mixed.txt", old_text="a\nb", new_text="x")
