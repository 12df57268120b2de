"""Path confinement, the part every workspace shares: a path a model gives becomes a
workspace-relative posix path, or a :class:`~fxdurable.errors.PathRefusedError` that says why.

:func:`confine` is purely lexical (no file system): it refuses what no workspace may hold,
whatever stores the files. A workspace on a file system adds its own checks on top (symlinks
that lead out, special files, writes through a symlink: :mod:`fxdurable.tools.fsfiles`).
"""

from __future__ import annotations

import re

from fxdurable.errors import PathRefusedError

__all__ = ["MAX_PATH_CHARS", "RESERVED", "confine", "glob_regex"]

MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: longer is no real file, only a probe
RESERVED = ".fxdurable"  # the workspace's own bookkeeping: never the model's to read or write

_DRIVE = re.compile(r"^[A-Za-z]:")


def confine(path: str) -> str:
    """``path`` as a normalised workspace-relative posix path (``./a//b`` -> ``a/b``;
    backslashes count as separators), or :class:`PathRefusedError` for an empty path, a NUL
    byte, a path over :data:`MAX_PATH_CHARS`, ``~``, an absolute path (``/x``, ``C:\\x``,
    ``\\\\server\\x``), any ``..`` component, or a path into ``.fxdurable``."""
    if not path or not path.strip():
        raise PathRefusedError(path, "the path is empty")
    if "\x00" in path:
        raise PathRefusedError(path, "the path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise PathRefusedError(path, f"the path is longer than {MAX_PATH_CHARS} characters")
    if path.startswith("~"):
        raise PathRefusedError(path, "~ (a home directory) is outside the workspace")
    slashed = path.replace("\\", "/")
    if slashed.startswith("/") or _DRIVE.match(slashed):
        raise PathRefusedError(path, "absolute paths are outside the workspace")
    parts = [part for part in slashed.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathRefusedError(path, "'..' leads out of the workspace")
    if not parts:
        raise PathRefusedError(path, "the path names the workspace itself, not a file in it")
    if parts[0] == RESERVED:
        raise PathRefusedError(path, f"{RESERVED} is reserved for the workspace's bookkeeping")
    return "/".join(parts)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex matching the workspace-relative paths ``pattern`` names: ``*`` and ``?`` within
    one path component, ``**`` across components (``**/`` also matches no directory at all),
    ``[...]`` a character class. Refuses patterns that reach outside, like :func:`confine`."""
    if pattern.startswith(("/", "~")) or _DRIVE.match(pattern) or ".." in pattern.split("/"):
        raise PathRefusedError(pattern, "glob patterns match inside the workspace only")
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z", re.S)
