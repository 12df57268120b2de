"""Test the artifact, not the source (DESIGN §9): build the wheel, install it in a fresh venv,
and use it from a directory where the source tree cannot be imported by accident.

Needs the ``build`` package in the test venv and an index to install pydantic and httpx from.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fxdurable import __version__

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], *, cwd: Path, timeout: float, what: str) -> str:
    # No PYTHONPATH / venv leakage from the test process into the fresh venv.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "FXD_CRASH_AT", "PIP_USER")
    }
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} timed out after {timeout:g}s: {cmd}\n{exc.stdout!r}\n{exc.stderr!r}")
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_built_wheel_works_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist)],
        cwd=REPO,
        timeout=300,
        what="building the wheel",
    )
    wheels = list(dist.glob("fxdurable-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}, found {wheels}"
    wheel = wheels[0]
    assert f"fxdurable-{__version__}-" in wheel.name

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert "fxdurable/py.typed" in names, "py.typed missing from the wheel: types would not ship"
    assert "fxdurable/stores/lua/commit.lua" in names, "the Redis store's Lua script must ship"
    assert "fxdurable/testing/invariants.py" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names), sorted(names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, timeout=120, what="venv")
    py, fxd = venv / "bin" / "python", venv / "bin" / "fxdurable"
    _run(
        [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
        cwd=tmp_path,
        timeout=300,
        what="pip install of the wheel",
    )

    work = tmp_path / "work"  # not the repo: the source tree is not importable from here
    work.mkdir()
    version = _run([str(fxd), "--version"], cwd=work, timeout=60, what="fxdurable --version")
    assert version.strip() == f"fxdurable {__version__}"

    where = _run(
        [str(py), "-c", "import fxdurable, fxdurable.testing; print(fxdurable.__file__)"],
        cwd=work,
        timeout=60,
        what="importing the installed package",
    )
    module = Path(where.strip()).resolve()
    assert module.is_relative_to(venv.resolve()), f"imported {module}, not the installed wheel"
    assert not module.is_relative_to(REPO), f"imported the source tree: {module}"

    demo = _run(
        [str(fxd), "demo", "--dir", "D"], cwd=work, timeout=120, what="fxdurable demo (wheel)"
    )
    assert "Outcome: completed" in demo, demo
    assert (work / "D" / "demo.db").is_file()
    check = _run(
        [str(fxd), "check", "--db", "D/demo.db", "--at-rest"],
        cwd=work,
        timeout=60,
        what="fxdurable check (wheel)",
    )
    assert check.startswith("ok: "), check
