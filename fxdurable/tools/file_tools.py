"""read_file, glob_files, grep_files, edit_file and write_file: one factory per tool.

Each tool confines the path it is given (:func:`~fxdurable.tools.paths.confine`) and then
works only through the session's :class:`~fxdurable.tools.workspace.Files`, so the same tools
serve every kind of workspace. Replay policies (DESIGN §3.5): the reads are ``safe`` with
``reuse=False`` (a recovered turn reads the files as they are now, not as they were before its
own edits); the writes are ``idempotent``: re-executed with the same execution id after a
crash, an applied write is detected and not applied again (``Files.apply_edit``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic

from fxdurable.errors import EditError, WorkspaceError
from fxdurable.runtime.tools import Tool, define_tool
from fxdurable.tools.paths import confine, glob_regex
from fxdurable.tools.workspace import Change, Workspace

if TYPE_CHECKING:
    from fxdurable.runtime.tools import ToolContext

__all__ = [
    "edit_file_tool",
    "glob_files_tool",
    "grep_files_tool",
    "read_file_tool",
    "write_file_tool",
]

MAX_GLOB_RESULTS = 1000
MAX_GREP_MATCHES = 200
MAX_LINE_CHARS = 2000  # a minified line would drown the rest of the answer


# What the model sends: each model's JSON schema is its tool's parameters.


class ReadFileInput(pydantic.BaseModel):
    path: str = pydantic.Field(description="file path relative to the workspace root")
    offset: int = pydantic.Field(default=1, ge=1, description="first line to read (1-based)")
    limit: int = pydantic.Field(default=2000, ge=1, description="how many lines to read")


class GlobFilesInput(pydantic.BaseModel):
    pattern: str = pydantic.Field(
        description="glob over workspace paths, e.g. '**/*.py' ('*' stays in one directory)"
    )


class GrepFilesInput(pydantic.BaseModel):
    pattern: str = pydantic.Field(description="a Python regular expression, searched per line")
    glob: str | None = pydantic.Field(
        default=None,
        description="only files matching this glob ('*.py' matches by file name at any depth)",
    )


class EditFileInput(pydantic.BaseModel):
    path: str = pydantic.Field(description="file path relative to the workspace root")
    old_text: str = pydantic.Field(description="the exact text to replace, as the file has it")
    new_text: str = pydantic.Field(description="the text to put in its place")
    replace_all: bool = pydantic.Field(
        default=False, description="replace every occurrence, not just a unique one"
    )


class WriteFileInput(pydantic.BaseModel):
    path: str = pydantic.Field(description="file path relative to the workspace root")
    content: str = pydantic.Field(description="the file's whole new content")


def text_of(path: str, data: bytes, error: type[WorkspaceError] = WorkspaceError) -> str:
    """``data`` as text, or ``error`` for a binary file (a NUL byte or not UTF-8)."""
    if b"\x00" in data:
        raise error(f"{path} is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path} is not UTF-8 text") from None


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}[... {len(line) - MAX_LINE_CHARS} characters cut]"


def _reading_tool(
    execute: Callable[[Any, ToolContext], str],
    input_model: type[pydantic.BaseModel],
    description: str,
) -> Tool:
    """A read: ``safe``, and ``reuse=False`` so a recovered turn reads the files as they are
    now, not as they were before its own edits. Named after ``execute``."""
    return define_tool(
        execute.__name__,
        description=description,
        input_model=input_model,
        execute=execute,
        replay="safe",
        reuse=False,
    )


def read_file_tool(workspace: Workspace) -> Tool:
    def read_file(inp: ReadFileInput, ctx: ToolContext) -> str:
        path = confine(inp.path)
        lines = text_of(path, workspace.open(ctx).read(path)).splitlines()
        if not lines:
            return f"({path} is empty)"
        if inp.offset > len(lines):
            raise WorkspaceError(f"{path} has {len(lines)} lines; offset {inp.offset} is past it")
        last = min(len(lines), inp.offset + inp.limit - 1)
        shown = "\n".join(f"{n:>6}\t{_clip(lines[n - 1])}" for n in range(inp.offset, last + 1))
        if last < len(lines):
            shown += f"\n[... {path} has {len(lines)} lines; read more with offset={last + 1}]"
        return shown

    return _reading_tool(
        read_file,
        ReadFileInput,
        "Read a text file of the workspace. Lines come numbered like `cat -n` "
        "(the numbers are not part of the file).",
    )


def glob_files_tool(workspace: Workspace) -> Tool:
    def glob_files(inp: GlobFilesInput, ctx: ToolContext) -> str:
        regex = glob_regex(inp.pattern)
        found = [p for p in workspace.open(ctx).list() if regex.match(p)]
        if not found:
            return f"no files match {inp.pattern}"
        shown = "\n".join(found[:MAX_GLOB_RESULTS])
        if len(found) > MAX_GLOB_RESULTS:
            shown += f"\n[... {len(found) - MAX_GLOB_RESULTS} more; narrow the pattern]"
        return shown

    return _reading_tool(
        glob_files,
        GlobFilesInput,
        "List the workspace's files whose paths match a glob pattern, sorted.",
    )


def grep_files_tool(workspace: Workspace) -> Tool:
    def grep_files(inp: GrepFilesInput, ctx: ToolContext) -> str:
        try:
            regex = re.compile(inp.pattern)
        except re.error as exc:
            raise WorkspaceError(f"invalid regular expression {inp.pattern!r}: {exc}") from None
        files = workspace.open(ctx)
        paths = files.list()
        if inp.glob is not None:
            only = glob_regex(inp.glob)
            by_name = "/" not in inp.glob  # like ripgrep: '*.py' names a file anywhere
            paths = [p for p in paths if only.match(p.rsplit("/", 1)[-1] if by_name else p)]
        matches: list[str] = []
        for path in paths:
            try:
                text = text_of(path, files.read(path))
            except WorkspaceError:
                continue  # binary, vanished or refused: not searched
            for n, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    matches.append(f"{path}:{n}:{_clip(line)}")
                    if len(matches) > MAX_GREP_MATCHES:
                        break
            if len(matches) > MAX_GREP_MATCHES:
                break
        if not matches:
            return f"no matches for {inp.pattern}"
        if len(matches) > MAX_GREP_MATCHES:
            return "\n".join(matches[:MAX_GREP_MATCHES]) + (
                f"\n[... stopped at {MAX_GREP_MATCHES} matches; narrow the pattern or the glob]"
            )
        return "\n".join(matches)

    return _reading_tool(
        grep_files,
        GrepFilesInput,
        "Search the workspace's text files for a regular expression; answers path:line:text.",
    )


def _in_line_endings_of(text: str, old_text: str, new_text: str) -> tuple[str, str]:
    """The edit's texts with the file's line endings. ``read_file`` shows a CRLF file's lines
    without their ``\r`` (``splitlines``), so a model copies them back with bare ``\n``: a
    multi-line ``old_text`` would never be found, and a ``new_text`` would mix endings. When
    the file's endings are all CRLF and the texts' are bare, both take the file's."""
    crlf = text.count("\r\n")
    if not crlf or crlf != text.count("\n") or "\r" in old_text or "\n" not in old_text:
        return old_text, new_text
    return old_text.replace("\n", "\r\n"), new_text.replace("\r\n", "\n").replace("\n", "\r\n")


def edited(inp: EditFileInput, path: str, before: bytes | None) -> Change:
    """The file after the edit, or :class:`EditError` saying what to do instead."""
    if before is None:
        raise EditError(f"no such file: {path}; create it with write_file")
    text = text_of(path, before, EditError)
    if not inp.old_text:
        raise EditError("old_text is empty; give the exact text to replace")
    if inp.old_text == inp.new_text:
        raise EditError("old_text and new_text are the same; nothing would change")
    old_text, new_text = _in_line_endings_of(text, inp.old_text, inp.new_text)
    count = text.count(old_text)
    if count == 0:
        raise EditError(
            f"old_text not found in {path}; read the file again and copy the text exactly "
            "(whitespace and indentation included)"
        )
    if count > 1 and not inp.replace_all:
        raise EditError(
            f"old_text occurs {count} times in {path}; include more surrounding lines to "
            "make it unique, or set replace_all"
        )
    after = text.replace(old_text, new_text)
    plural = "occurrence" if count == 1 else "occurrences"
    return Change(after.encode("utf-8"), f"edited {path}: replaced {count} {plural}")


def edit_file_tool(workspace: Workspace) -> Tool:
    def edit_file(inp: EditFileInput, ctx: ToolContext) -> str:
        path = confine(inp.path)
        return workspace.open(ctx).apply_edit(
            path, lambda before: edited(inp, path, before), execution_id=ctx.execution_id
        )

    return define_tool(
        "edit_file",
        description=(
            "Replace exact text in a workspace file. old_text must occur exactly once "
            "(or set replace_all); read the file first."
        ),
        input_model=EditFileInput,
        execute=edit_file,
        replay="idempotent",
    )


def write_file_tool(workspace: Workspace) -> Tool:
    def write_file(inp: WriteFileInput, ctx: ToolContext) -> str:
        path = confine(inp.path)
        data = inp.content.encode("utf-8")
        change = Change(data, f"wrote {path} ({len(data)} bytes)")
        return workspace.open(ctx).apply_edit(
            path, lambda before: change, execution_id=ctx.execution_id
        )

    return define_tool(
        "write_file",
        description="Create or overwrite a workspace file (parent directories are created).",
        input_model=WriteFileInput,
        execute=write_file,
        replay="idempotent",
    )
