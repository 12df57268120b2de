"""The previous release, for the rolling-deploy tests and the store it left (docs/upgrading.md).

fxdurable has no tagged releases yet: the previous release is a pinned commit of main
(:data:`PREVIOUS`), moved forward when a release is cut. :func:`previous_tree` extracts that
commit's tree (``git archive``: its ``fxdurable`` package, its test agents and its crash
driver) into a directory; a process started with that directory first on its ``PYTHONPATH``
runs the old release's code against the same store and queue as a current one, with the
dependencies of this venv (what a deploy changes here is fxdurable, not its dependencies).
The clone must hold the commit: a shallow one fails the test and says so, it never skips.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# 2026-12-03, the last commit before turns recorded their agent's version: what it writes
# differs from today's (no agent_version, no owed webhooks, no timed-out questions, no recorded
# step errors), and its workers know neither the newer events nor the newer record fields.
PREVIOUS = "2ec58f045395588b447b3ae1452a2bd9c314c70c"
PATHS = ("fxdurable", "tests/kit", "tests/workers", "tests/crash")  # what the tests run of it


def previous_tree(dest: Path) -> Path:
    """The previous release's tree in ``dest`` (made), its modules compiled once."""
    done = subprocess.run(
        ["git", "archive", "--format=tar", PREVIOUS, *PATHS],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"the previous release {PREVIOUS[:12]} is not in this clone's history "
            f"(a shallow clone? git fetch --unshallow): {done.stderr.decode(errors='replace')}"
        )
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "fxdurable", "tests"],
        cwd=dest,
        capture_output=True,
        check=False,
    )
    return dest


def old_worker_env(tree: Path, mods: Path, module: str) -> dict[str, str]:
    """What an old worker's environment changes: the old tree first on its path, with the old
    release's own story agents (``tests/workers/rq_story_agents.py`` of that commit) copied
    into ``mods`` under the harness's module name."""
    mods.mkdir(parents=True, exist_ok=True)
    source = tree / "tests" / "workers" / "rq_story_agents.py"
    (mods / f"{module}.py").write_bytes(source.read_bytes())
    path = [str(mods), str(tree / "tests" / "workers"), str(tree)]
    return {"PYTHONPATH": os.pathsep.join(path)}
