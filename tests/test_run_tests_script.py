"""``scripts/run-tests`` (what ``make test`` and CI run) ends a run that would hang: a worker
that crashes stops the run naming its test, and a run past FXD_TEST_RUN_LIMIT_S is
interrupted with pytest's summary of what ran. Each case runs the script on a throwaway
project of two test files, with this venv."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.system


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "run-tests", tmp_path / "scripts" / "run-tests")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = t\naddopts = -p no:cacheprovider\n")
    (tmp_path / "t").mkdir()
    for name, body in files.items():
        (tmp_path / "t" / name).write_text(body)
    return tmp_path


def _run(project: Path, **env: str) -> tuple[int, str]:
    done = subprocess.run(
        ["scripts/run-tests"],
        cwd=project,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FXD_")}, **env},
        capture_output=True,
        text=True,
        timeout=110,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_worker_that_crashes_ends_the_run_naming_its_test(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "test_a_crash.py": "import os\n\ndef test_dies():\n    os._exit(1)\n\n"
            "def test_after():\n    pass\n",
            "test_b_fine.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
            "test_c_fine.py": "def test_three():\n    pass\n",
        },
    )
    rc, out = _run(project, FXD_TEST_WORKERS="1")
    assert rc != 0, out
    assert "crashed and worker restarting disabled" in out, out
    assert "test_a_crash.py::test_dies" in out, out


def test_a_run_past_its_limit_is_interrupted_with_its_summary(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "test_a_fine.py": "def test_quick():\n    pass\n",
            "test_b_hangs.py": "import time\n\ndef test_hangs():\n    time.sleep(300)\n",
        },
    )
    # Long enough for pytest to start and pass the quick test on a loaded machine (~2 s).
    rc, out = _run(project, FXD_TEST_WORKERS="0", FXD_TEST_RUN_LIMIT_S="10")
    assert rc == 124, out
    assert "a test hangs" in out and "FXD_TEST_RUN_LIMIT_S=10s" in out, out
    assert "KeyboardInterrupt" in out and "1 passed" in out, out
