"""``make demo``'s virtualenv: a Python older than 3.11 is refused with a message naming
``PYTHON=``, a ``.venv`` made by another Python version (or broken) is rebuilt, and the demo's
venv installs the extras the README's commands use. Real ``make`` on a temporary copy of the
Makefile, ``scripts/check-venv`` and ``pyproject.toml``; fake interpreters are shell scripts
that answer the version query."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HERE = "{}.{}".format(*sys.version_info[:2])


def _fake_python(path: Path, version: str) -> Path:
    """An executable that prints ``version`` for any ``-c`` query, as check-venv asks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "Makefile", tmp_path / "Makefile")
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy2(REPO / "scripts" / "check-venv", tmp_path / "scripts" / "check-venv")
    return tmp_path


def _make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unsupported_python_is_refused_naming_python_and_leaves_no_venv(project: Path):
    old = _fake_python(project / "bin" / "python3.9", "3.9")
    done = _make(project, "demo", f"PYTHON={old}")
    assert done.returncode != 0
    assert f"PYTHON={old} is Python 3.9; fxdurable needs 3.11 or newer" in done.stderr
    assert "make demo PYTHON=python3.12" in done.stderr
    assert not (project / ".venv").exists(), "nothing for a later run to trip over"


def test_a_missing_python_is_refused_naming_python(project: Path):
    done = _make(project, "demo", "PYTHON=no-such-python3.99")
    assert done.returncode != 0
    assert "PYTHON=no-such-python3.99 is not a Python this machine can run" in done.stderr


def test_a_venv_of_another_python_is_rebuilt_even_with_a_current_stamp(project: Path):
    """The venv an earlier run left (made by 3.9, stamped as installed): with PYTHON= a good
    Python, make demo removes it and builds the demo's environment afresh, with the extras
    the README's commands need."""
    _fake_python(project / ".venv" / "bin" / "python", "3.9")
    (project / ".venv" / ".installed-demo").touch()  # newer than pyproject.toml
    done = _make(project, "venv-python", f"PYTHON={sys.executable}")
    assert done.returncode == 0, done.stderr
    assert f"rebuilding .venv: its Python is 3.9, PYTHON={sys.executable} is {HERE}" in (
        done.stderr
    )
    assert not (project / ".venv").exists()
    plan = _make(project, "-n", "demo", f"PYTHON={sys.executable}")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if "scripts/check-venv" in line)
    build = next(i for i, line in enumerate(lines) if f"{sys.executable} -m venv .venv" in line)
    assert check < build, "the check comes before the stamps are looked at"
    assert "pip install -q -e '.[http,redis,aws]'" in plan.stdout


def test_a_broken_venv_is_rebuilt(project: Path):
    (project / ".venv" / "bin").mkdir(parents=True)  # no interpreter in it
    done = _make(project, "venv-python", f"PYTHON={sys.executable}")
    assert done.returncode == 0, done.stderr
    assert "rebuilding .venv: its Python is none (broken)" in done.stderr
    assert not (project / ".venv").exists()


def test_a_venv_of_the_same_python_is_kept(project: Path):
    _fake_python(project / ".venv" / "bin" / "python", HERE)
    done = _make(project, "venv-python", f"PYTHON={sys.executable}")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert (project / ".venv" / "bin" / "python").exists()


def test_make_clean_removes_every_generated_tree_and_keeps_the_sources(project: Path):
    generated = [".venv", ".venv-bench", ".venv-build", "dist", "build", "site", ".fxd-demo"]
    for name in generated:
        (project / name).mkdir()
        (project / name / "x").write_text("x")
    done = _make(project, "clean")
    assert done.returncode == 0, done.stderr
    assert [n for n in generated if (project / n).exists()] == []
    assert (project / "Makefile").exists() and (project / "pyproject.toml").exists()
