"""The web console's files: ``GET /console`` (its index.html) and ``GET /console/<asset>``.

The assets are plain files (ES modules, CSS, HTML; no build step) in ``fxdurable/console/static/``,
which the wheel ships as package data (hatch includes every file under ``fxdurable/``). They
need no token: the console asks for one when an API call answers 401 and sends it with its API
calls only. A path that leaves the directory (``..``, an absolute path, a symlink out) is
refused with the 404 of a missing file; so is a hidden file.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from fxdurable.http.problems import ApiError

__all__ = ["STATIC_DIR", "ConsoleFiles", "to_console"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "console" / "static"

# Explicit types for what the console is made of: mimetypes' answer depends on the host's
# /etc/mime.types (some map .js to application/x-javascript, which a module script refuses).
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
}
# A browser revalidates on each load (the files change with the installed version) and
# never sniffs a type other than the one sent.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

# What /console answers when the package has no console files (a source tree where they
# were not added yet): a page that says so, rather than a 404 that looks like a wrong URL.
_PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fxdurable console</title></head>
<body><h1>fxdurable console</h1>
<p>The console's files are not installed in this copy of fxdurable
(<code>fxdurable/console/static/</code> is empty). The HTTP API works: see
<a href="/openapi.json">/openapi.json</a>.</p></body></html>
"""


# The longest file name (in bytes) the filesystems we run on accept (Linux's NAME_MAX, macOS's).
_NAME_MAX = 255


def _not_found(path: str) -> ApiError:
    return ApiError(404, "not_found", f"no console file {path[:200]!r}")


def _file(root: Path, relative: str) -> Path | None:
    """``relative`` under ``root``, or None when it is missing or would leave ``root``."""
    parts = relative.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") or "\\" in p for p in parts):
        return None
    try:
        # No file has such a name, and resolve() would raise on it (ValueError, OSError).
        if "\0" in relative or any(len(p.encode()) > _NAME_MAX for p in parts):
            return None
        candidate = (root / relative).resolve()
        if not candidate.is_relative_to(root.resolve()) or not candidate.is_file():
            return None
    except (OSError, ValueError):  # a name the OS refuses (a path too long, ...): none such
        return None
    return candidate


def _serve(path: Path) -> Response:
    media = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]
    return FileResponse(path, media_type=media or "application/octet-stream", headers=_HEADERS)


class ConsoleFiles:
    """The routes' handlers over the files in ``root``."""

    def __init__(self, root: Path = STATIC_DIR) -> None:
        self.root = root

    async def index(self, request: Request) -> Response:
        found = _file(self.root, "index.html")
        if found is None:
            return HTMLResponse(_PLACEHOLDER, headers=_HEADERS)
        return _serve(found)

    async def asset(self, request: Request) -> Response:
        relative = request.path_params["path"]
        if relative == "":
            return await self.index(request)
        found = _file(self.root, relative)
        if found is None:
            raise _not_found(relative)
        return _serve(found)


async def to_console(request: Request) -> Response:
    """``GET /`` under ``--dev``: the console is what a person opening the server wants."""
    return RedirectResponse("/console/", status_code=307)
