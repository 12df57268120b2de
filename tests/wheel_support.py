"""The user's project is not this repository (DESIGN §9): helpers for tests that build the
wheel, install it into a fresh virtualenv and run it from an empty directory, where the source
tree cannot be imported by accident.

``built_wheel()`` builds the wheel (and sdist) once per run; ``wheel_venv(extras)`` creates
one venv per extras set per run and returns it, so tests of several files that need
``fxdurable[redis]`` pay for one install, whichever xdist worker runs them: the run's
processes share one directory (``open_run_dir``), each build under a file lock. Tests must
not install into a venv they got from ``wheel_venv``: a test that needs more packages makes its
own with ``make_venv``.

``clean_env()`` is the environment those commands run with: no PYTHONPATH, no venv of the
test process, no ``FXD_*`` setting of the developer's (tokens, stores) that would change what
the installed command does.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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
    "stop_process",
    "wait_for_health",
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


def wait_for_health(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``fxdurable serve`` at ``url`` answers ``/healthz`` (60 s); its exit or silence
    fails the test with its log."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"serve exited ({proc.returncode}):\n{log.read_text()}"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"serve never answered:\n{log.read_text()}"
        time.sleep(0.1)


def stop_process(proc: subprocess.Popen[bytes], log: Path) -> str:
    """SIGTERM ``proc`` (SIGKILL after 60 s) and return its log."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return log.read_text()


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


# The directory a run's processes share (scripts/run-tests' xdist workers included): the
# controller's pytest_configure makes it and names it here before the workers start, so they
# inherit it, and removes it when the run ends (open_run_dir / close_run_dir, tests/conftest.py).
RUN_DIR_ENV = "FXD_TEST_WHEEL_DIR"
# Written last into a finished build or venv: one a process was killed in the middle of is made
# again by the next process that asks.
_COMPLETE = ".fxd-complete"

_scratch: Path | None = None
_dist: Path | None = None
_venvs: dict[str, Venv] = {}


def open_run_dir() -> Path | None:
    """The run's shared directory, made and exported to the processes started after; None when
    an outer process already made one (this process is an xdist worker or a nested run)."""
    if os.environ.get(RUN_DIR_ENV):
        return None
    made = Path(tempfile.mkdtemp(prefix="fxd-wheel-"))
    os.environ[RUN_DIR_ENV] = str(made)
    return made


def close_run_dir(made: Path | None) -> None:
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(RUN_DIR_ENV, None)


def source_hash() -> str:
    """What the wheel is built from: the package's files and the project's metadata, so a
    process never takes a wheel of another tree."""
    digest = hashlib.sha256()
    files = [REPO / "pyproject.toml", REPO / "README.md", REPO / "LICENSE"]
    files += sorted(p for p in (REPO / "fxdurable").rglob("*") if "__pycache__" not in p.parts)
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _scratch_dir() -> Path:
    """Where the wheel and the venvs are: the run's shared directory (keyed by the source
    hash), or, outside a run that made one, this process's own."""
    global _scratch
    if _scratch is None:
        shared = os.environ.get(RUN_DIR_ENV)
        if shared:
            _scratch = Path(shared) / source_hash()
            _scratch.mkdir(parents=True, exist_ok=True)
        else:
            _scratch = Path(tempfile.mkdtemp(prefix="fxd-wheel-"))
            atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


@contextlib.contextmanager
def _made_once(where: Path) -> Iterator[bool]:
    """Under a lock shared by the run's processes: yields whether ``where`` is still to be made
    (removing what a killed maker left); the maker's success marks it complete."""
    with open(where.with_name(where.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (where / _COMPLETE).exists():
            yield False
            return
        shutil.rmtree(where, ignore_errors=True)
        yield True
        (where / _COMPLETE).write_text("")


def _build() -> Path:
    global _dist
    if _dist is None:
        dist = _scratch_dir() / "dist"
        with _made_once(dist) as to_make:
            if to_make:
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
        where = _scratch_dir() / name
        with _made_once(where) as to_make:
            if to_make:
                make_venv(where, requirement)
        _venvs[key] = Venv(where)
    return _venvs[key]
