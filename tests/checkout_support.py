"""A checkout of this repository as the docs' ``make`` commands see it, for running them
verbatim: its Makefile and the script the Makefile runs first, its examples, and a ``.venv``
that is the venv these tests run in (its demo install marked current, so ``make`` installs
nothing). What the commands write (``.fxd-coding/``, ``.fxd-demo/``) lands there, not in the
repository."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["ROOT", "checkout"]

ROOT = Path(__file__).resolve().parent.parent


def checkout(tmp_path: Path) -> Path:
    """``tmp_path/repo``: the files the Makefile's demo targets need, and the venv."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    os.utime(repo / "pyproject.toml", (0, 0))  # older than the venv's install markers
    (repo / "scripts").mkdir()  # the Makefile checks the venv's Python with it first
    shutil.copy(ROOT / "scripts" / "check-venv", repo / "scripts" / "check-venv")
    shutil.copytree(
        ROOT / "examples", repo / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = repo / ".venv"
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if not entry.name.startswith("."):
            (venv / entry.name).symlink_to(entry)
    (venv / ".installed-demo").touch()
    return repo
