"""Writes ``tests/crash/fixtures/previous-release/``: the store and the outside world the
previous release (``tests/previous_release.py``: ``PREVIOUS``) left when it was SIGKILLed after
the story's unsafe ``deploy`` took effect and before its result was recorded
(``tool.after-execute:deploy``). ``test_previous_release_store.py`` continues it with today's
code. Run it from the project root when ``PREVIOUS`` moves:

    .venv/bin/python tests/crash/make_previous_release_store.py

It runs that commit's own crash driver (``tests/crash/driver.py`` of the commit) with the
commit's ``fxdurable`` first on the path, then folds the SQLite write-ahead log into the file
(the kill leaves one) so the fixture is one file.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from previous_release import PREVIOUS, previous_tree  # noqa: E402

FIXTURE = HERE / "fixtures" / "previous-release"
STORE = "store.sqlite3"
CRASH_AT = "tool.after-execute:deploy"


def make(dest: Path = FIXTURE) -> Path:
    with tempfile.TemporaryDirectory() as scratch:
        tree = previous_tree(Path(scratch) / "tree")
        work = Path(scratch) / "out"
        world = work / "world"
        world.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        env.update(PYTHONPATH=str(tree), FXD_CRASH_AT=CRASH_AT, NO_COLOR="1")
        driver = tree / "tests" / "crash" / "driver.py"
        store = f"sqlite:///{work / STORE}"
        argv = [sys.executable, str(driver), "--store", store, "--dir", str(world)]
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != -signal.SIGKILL:
            raise SystemExit(f"the old driver did not die at {CRASH_AT}:\n{done.stderr}")
        with sqlite3.connect(work / STORE) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        for leftover in ("-wal", "-shm"):
            (work / (STORE + leftover)).unlink(missing_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work, dest)
        (dest / "PREVIOUS").write_text(PREVIOUS + "\n")
    return dest


if __name__ == "__main__":
    print(f"wrote {make()}")
