"""The user's project is not this repository (DESIGN §9): helpers for tests that build the
wheel, install it into a fresh virtualenv and run it from an empty directory, where the source
tree cannot be imported by accident.

``built_wheel()`` builds the wheel (and sdist) once per test process; ``wheel_venv(extras)``
creates one venv per extras set per test process and returns it, so tests of several files
that need ``fxdurable[redis]`` pay for one install. Tests must not install into a venv they
got from ``wheel_venv``: a test that needs more packages makes its own with ``make_venv``.

``clean_env()`` is the environment those commands run with: no PYTHONPATH, no venv of the
test process, no ``FXD_*`` setting of the developer's (tokens, stores) that would change what
the installed command does.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Every extra: the packaging test's venv, shared with the tests whose projects need several
# (the framework examples), so one run of the suite makes it once.
ALL_EXTRAS = "aws,http,lambda,langchain,mcp,openai-agents,otel,pydantic-ai,redis"

__all__ = [
    "REPO",
    "Venv",
    "built_sdist",
    "built_wheel",
    "clean_env",
    "make_venv",
    "run",
    "run_failing",
    "wheel_venv",
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_USER")
        and not k.startswith("FXD_")
    }
    env.update(extra)
    return env


def _complete(
    cmd: list[str], *, cwd: Path, timeout: float, what: str, env: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to its end; a timeout fails the test with what it had printed."""
    try:
        return subprocess.run(
            cmd,
            cwd=cwd,
            env=clean_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} timed out after {timeout:g}s: {cmd}\n{exc.stdout!r}\n{exc.stderr!r}")


def run(
    cmd: list[str],
    *,
    cwd: Path,
    timeout: float,
    what: str,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd``; its stdout. A failure or a timeout fails the test with both streams."""
    proc = _complete(cmd, cwd=cwd, timeout=timeout, what=what, env=env)
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc.stdout


def run_failing(
    cmd: list[str],
    *,
    cwd: Path,
    timeout: float,
    what: str,
    env: dict[str, str] | None = None,
) -> str:
    """Run a command that must fail with a message, not a traceback; its stderr."""
    proc = _complete(cmd, cwd=cwd, timeout=timeout, what=what, env=env)
    assert proc.returncode != 0, f"{what} succeeded:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{what}: a traceback, not a message:\n{proc.stderr}"
    return proc.stderr


@dataclass(frozen=True)
class Venv:
    """A fresh virtualenv outside the repository."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def exe(self, name: str) -> Path:
        return self.bin / name


def make_venv(where: Path, *requirements: str, python: str = sys.executable) -> Venv:
    """A new venv at ``where`` with ``requirements`` installed (pip's own arguments)."""
    run([python, "-m", "venv", str(where)], cwd=where.parent, timeout=120, what="venv")
    venv = Venv(where)
    if requirements:
        run(
            [str(venv.python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             *requirements],
            cwd=where.parent, timeout=600, what=f"pip install {' '.join(requirements)}",
        )  # fmt: skip
    return venv


_scratch: Path | None = None
_dist: Path | None = None
_venvs: dict[str, Venv] = {}


def _scratch_dir() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="fxd-wheel-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def _build() -> Path:
    global _dist
    if _dist is None:
        dist = _scratch_dir() / "dist"
        run(
            [sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(dist)],
            cwd=REPO,
            timeout=600,
            what="building the wheel and the sdist",
        )
        _dist = dist
    return _dist


def built_wheel() -> Path:
    """The wheel built from this checkout, once per test process."""
    from fxdurable import __version__

    wheels = list(_build().glob("fxdurable-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, found {wheels}"
    assert f"fxdurable-{__version__}-" in wheels[0].name
    return wheels[0]


def built_sdist() -> Path:
    """The sdist built with the wheel."""
    sdists = list(_build().glob("fxdurable-*.tar.gz"))
    assert len(sdists) == 1, f"expected one sdist, found {sdists}"
    return sdists[0]


def wheel_venv(extras: str = "") -> Venv:
    """A venv with the built wheel installed with ``extras`` (e.g. ``"redis,http"``), shared by
    every test of this process that asks for the same extras. Read-only for its users."""
    key = ",".join(sorted(e.strip() for e in extras.split(",") if e.strip()))
    if key not in _venvs:
        name = "venv-" + (key.replace(",", "-") or "bare")
        requirement = f"{built_wheel()}[{key}]" if key else str(built_wheel())
        _venvs[key] = make_venv(_scratch_dir() / name, requirement)
    return _venvs[key]
