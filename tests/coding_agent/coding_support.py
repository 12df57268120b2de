"""Running ``examples/coding_agent/run.py`` from the tests: a process with the machine's model
choices removed (the test sets what it wants), and the checks of what it leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "examples" / "coding_agent" / "run.py"
README = ROOT / "README.md"
# What picks a model or a crash: the tests choose, not the machine they run on.
_CHOOSERS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "FXD_CODING_MODEL")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CHOOSERS and k != "FXD_CRASH_AT"}
    return env | extra


def run(
    where: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUN), "--dir", str(where), *args],
        cwd=where.parent,
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def project_tests_pass(where: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=where / "workspace" / "coder",
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def audit(where: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--db", str(where / "coding.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def cart(where: Path) -> str:
    return (where / "workspace" / "coder" / "shop" / "cart.py").read_text()
