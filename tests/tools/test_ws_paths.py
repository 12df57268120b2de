"""Confinement: every hostile path is refused with a PathRefusedError that says why, and
nothing outside the workspace is read or written.

The table runs each path through the real tools on a directory workspace whose session
directory holds the traps: symlinks out (to a file, to a directory, to /dev/null), a FIFO, a
Unix socket, and a symlink inside that points inside (readable, never written through).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from ws_support import call, context, tools_of

from fxdurable import tools as fxt
from fxdurable.errors import PathRefusedError, WorkspaceError
from fxdurable.tools.paths import confine

SECRET = "the outside secret"


@pytest.fixture
def trapped(tmp_path: Path) -> Iterator[tuple[dict, Path, Path]]:
    """The tools of a workspace whose session s1 is full of traps, its directory, and the
    directory outside it the traps point to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    ws = fxt.directory(tmp_path / "ws")
    tools = tools_of(ws)
    call(tools["write_file"], path="real.txt", content="inside\n")
    home = tmp_path / "ws" / "s1"
    os.symlink(outside / "secret.txt", home / "out_file")
    os.symlink(outside, home / "out_dir")
    os.symlink("/dev/null", home / "null")
    os.symlink("real.txt", home / "alias.txt")
    os.mkfifo(home / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(home / "sock"))
    try:
        yield tools, home, outside
    finally:
        server.close()


# (id, tool, arguments, what the message says)
HOSTILE = [
    ("dotdot", "read_file", {"path": "../secret.txt"}, "'..' leads out"),
    ("dotdot-deep", "read_file", {"path": "a/../../outside/secret.txt"}, "'..' leads out"),
    ("dotdot-backslash", "read_file", {"path": "..\\outside\\secret.txt"}, "'..' leads out"),
    ("absolute", "read_file", {"path": "/etc/passwd"}, "absolute paths"),
    ("windows-drive", "read_file", {"path": "C:\\Windows\\win.ini"}, "absolute paths"),
    ("windows-unc", "read_file", {"path": "\\\\server\\share\\x"}, "absolute paths"),
    ("tilde", "read_file", {"path": "~/.ssh/id_rsa"}, "home directory"),
    ("nul", "read_file", {"path": "real.txt\x00.png"}, "NUL byte"),
    ("empty", "read_file", {"path": ""}, "empty"),
    ("blank", "read_file", {"path": "   "}, "empty"),
    ("dot", "read_file", {"path": "./"}, "workspace itself"),
    ("reserved", "read_file", {"path": ".fxdurable/ledger/x.json"}, "reserved"),
    ("reserved-write", "write_file", {"path": "./.fxdurable/x", "content": "x"}, "reserved"),
    ("over-long", "read_file", {"path": "a/" * 2100 + "x"}, "longer than 4096"),
    ("symlink-out-file", "read_file", {"path": "out_file"}, "out of the workspace"),
    ("symlink-out-dir", "read_file", {"path": "out_dir/secret.txt"}, "out of the workspace"),
    (
        "write-into-symlinked-dir",
        "write_file",
        {"path": "out_dir/new.txt", "content": "x"},
        "out of the workspace",
    ),
    ("device-via-symlink", "read_file", {"path": "null"}, "out of the workspace"),
    ("fifo", "read_file", {"path": "pipe"}, "a FIFO"),
    ("fifo-write", "write_file", {"path": "pipe", "content": "x"}, "a FIFO"),
    ("socket", "read_file", {"path": "sock"}, "a socket"),
    (
        "write-through-symlink",
        "write_file",
        {"path": "alias.txt", "content": "x"},
        "writing through a symlink",
    ),
    (
        "edit-through-symlink",
        "edit_file",
        {"path": "alias.txt", "old_text": "inside", "new_text": "x"},
        "writing through a symlink",
    ),
    ("glob-out", "glob_files", {"pattern": "../outside/*"}, "inside the workspace only"),
    ("glob-absolute", "glob_files", {"pattern": "/etc/*"}, "inside the workspace only"),
    ("grep-glob-out", "grep_files", {"pattern": "secret", "glob": "../**"}, "inside"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "says"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
def test_a_hostile_path_is_refused_with_a_clear_error(trapped, tool, arguments, says):
    tools, home, outside = trapped
    before = sorted(os.listdir(home)), (home / "real.txt").read_text()
    with pytest.raises(PathRefusedError) as refused:
        call(tools[tool], **arguments)
    message = str(refused.value)
    assert message.startswith("path refused: ") and says in message, message
    assert "relative to the workspace root" in message
    assert (sorted(os.listdir(home)), (home / "real.txt").read_text()) == before
    assert os.listdir(outside) == ["secret.txt"]


def test_a_symlink_inside_that_points_inside_reads_the_file(trapped):
    tools, _, _ = trapped
    assert call(tools["read_file"], path="alias.txt") == "     1\tinside"


def test_listing_and_search_skip_every_trap(trapped):
    tools, _, _ = trapped
    assert call(tools["glob_files"], pattern="**") == "real.txt"
    assert call(tools["grep_files"], pattern="secret|inside") == "real.txt:1:inside"


def test_a_directory_is_not_a_file(trapped):
    tools, home, _ = trapped
    (home / "src").mkdir()
    with pytest.raises(WorkspaceError, match="src is a directory; use glob_files"):
        call(tools["read_file"], path="src")


@pytest.mark.parametrize(
    ("given", "confined"),
    [("./a//b.py", "a/b.py"), ("src\\app.py", "src/app.py"), ("a/./b", "a/b"), ("x..y", "x..y")],
)
def test_harmless_spellings_are_normalised(given, confined):
    assert confine(given) == confined


def test_the_refusal_names_the_path_and_the_reason():
    with pytest.raises(PathRefusedError) as refused:
        call(
            tools_of(fxt.directory("/nonexistent-never-created"))["read_file"],
            context(),
            path="../../etc/shadow",
        )
    assert (refused.value.path, refused.value.reason) == (
        "../../etc/shadow",
        "'..' leads out of the workspace",
    )
