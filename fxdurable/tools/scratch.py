"""Scratch directories for a stored workspace's ``shell``, and the sweep of those that killed
processes left behind.

``shell`` on a stored workspace materialises the session's files into a scratch directory
under ``$TMPDIR`` and removes it when the call ends. A process killed meanwhile (SIGKILL, the
OOM killer, a redeploy) cannot: its copy of the workspace would stay forever, one per crash.
So each scratch directory is named after its process, ``fxd-ws-<host>-<pid>-<random>``, and
making one first removes those of this host whose process is certainly dead (gone, or a
zombie). A directory of a live process, of another host (a shared ``/tmp``), or with a name
this module did not make is left alone. (Containers that share a ``/tmp`` must not share a
host name too: a pid is only meaningful within its own PID namespace.)
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["host_prefix", "make_scratch", "sweep_abandoned"]


def host_prefix(host: str) -> str:
    """How the names of ``host``'s scratch directories start (a pid and ``-`` follow)."""
    return f"fxd-ws-{re.sub(r'[^A-Za-z0-9.]', '_', host)}-"


def make_scratch() -> Path:
    """A new, empty scratch directory of this process, once the abandoned ones are swept."""
    sweep_abandoned(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=f"{host_prefix(socket.gethostname())}{os.getpid()}-"))


def sweep_abandoned(where: Path) -> list[str]:
    """Remove the scratch directories in ``where`` whose process on this host is dead;
    returns their names."""
    from fxdurable.runtime.worker import local_process_is_dead

    host = socket.gethostname()
    mark = host_prefix(host)
    removed = []
    with os.scandir(where) as entries:
        for entry in entries:
            pid = entry.name[len(mark) :].partition("-")[0]
            if not entry.name.startswith(mark) or not pid.isdigit():
                continue
            if local_process_is_dead(host, int(pid)) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
    return removed
