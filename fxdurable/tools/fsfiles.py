"""File-system confinement and atomic writes for a workspace kept in a directory.

Paths arrive lexically confined (:func:`fxdurable.tools.paths.confine`); what only the file
system can tell is checked here: the real path (symlinks resolved) stays inside the session
directory, reads and writes touch regular files only (never a FIFO, a device or a socket,
which could block or leak), and no write goes *through* a symlink. Files are opened with
``O_NOFOLLOW | O_NONBLOCK`` and checked again with ``fstat``, so a symlink or FIFO swapped in
after the check is refused rather than followed or waited on.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from fxdurable.errors import PathRefusedError, WorkspaceError
from fxdurable.tools.paths import RESERVED

__all__ = [
    "MAX_FILE_BYTES",
    "fsync_dir",
    "read_for_write",
    "read_regular",
    "regular_files",
    "replace_file",
    "write_atomic",
]

MAX_FILE_BYTES = 20 * 1024 * 1024  # a workspace file a tool reads whole; larger is not source

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def _inside(where: Path, path: str, real: str) -> None:
    root = str(where)
    if real != root and not real.startswith(root + os.sep):
        raise PathRefusedError(path, "it leads out of the workspace through a symlink")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _check_regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"{path} is a directory; use glob_files to list its files")
    if not stat.S_ISREG(st.st_mode):
        raise PathRefusedError(path, f"it is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise WorkspaceError(f"{path} is {st.st_size} bytes, over the {MAX_FILE_BYTES}-byte limit")


def _read(real: str, path: str) -> bytes:
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:  # ELOOP: a symlink swapped in after the check; ENXIO: a socket
        raise PathRefusedError(path, f"it cannot be opened safely ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as file:
        _check_regular(path, os.fstat(fd))
        return file.read()


def read_regular(where: Path, path: str) -> bytes:
    """The bytes of the regular file ``path`` of ``where``; a symlink is followed only when
    its target is inside ``where``."""
    real = os.path.realpath(where / path)
    _inside(where, path, real)
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        raise WorkspaceError(f"no such file: {path}") from None
    _check_regular(path, st)
    return _read(real, path)


def _writable_parent(where: Path, path: str) -> Path:
    target = where / path
    _inside(where, path, os.path.realpath(target.parent))
    if os.path.islink(target):
        raise PathRefusedError(path, "it is a symlink, and writing through a symlink is refused")
    return target


def read_for_write(where: Path, path: str) -> bytes | None:
    """The current bytes of ``path`` (None if absent), checked for a write: its directory
    inside ``where``, the file itself neither a symlink nor a special file."""
    target = _writable_parent(where, path)
    try:
        st = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):
        return None
    _check_regular(path, st)
    return _read(str(target), path)


def replace_file(where: Path, path: str, data: bytes) -> None:
    """Replace (or create) ``path`` atomically, creating its directories inside ``where``;
    an existing file keeps its permission bits."""
    target = _writable_parent(where, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise WorkspaceError(f"cannot write {path}: a parent of it is a file") from None
    target = _writable_parent(where, path)  # again: a directory may have been swapped in
    try:
        mode: int | None = stat.S_IMODE(os.lstat(target).st_mode)
    except FileNotFoundError:
        mode = None
    write_atomic(target, data, mode=mode)


def write_atomic(target: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``target``, sync it, rename it over
    ``target`` and sync the directory: a crash leaves the old file or the new, never half."""
    temp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def regular_files(where: Path) -> list[str]:
    """Every regular file under ``where`` (symlinks and special files left out, symlinked
    directories not entered), as sorted posix paths relative to it."""
    found: list[str] = []
    for top, dirs, files in os.walk(where):
        if top == str(where) and RESERVED in dirs:
            dirs.remove(RESERVED)
        base = Path(top).relative_to(where)
        for name in files:
            try:
                regular = stat.S_ISREG(os.lstat(os.path.join(top, name)).st_mode)
            except FileNotFoundError:  # deleted while we walked
                continue
            if regular:
                found.append((base / name).as_posix())
    return sorted(found)
