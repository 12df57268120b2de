"""The wheel and its venvs are made once per run, shared by the run's processes
(tests/wheel_support.py): the directory is exported before xdist starts the workers, and a
build is made once under its lock, again only when the one before did not finish."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import wheel_support


def test_the_run_directory_is_exported_to_the_processes_of_the_run() -> None:
    shared = os.environ.get(wheel_support.RUN_DIR_ENV)
    assert shared and Path(shared).is_dir()
    assert wheel_support.open_run_dir() is None  # a worker or a nested run makes none


def test_a_build_is_made_once_by_racing_makers(tmp_path: Path) -> None:
    """Four makers at once: each that is told to make waits (up to 1 s) for the others to be
    told so too, which only happens without the lock."""
    where, made, entered = tmp_path / "venv-x", [], threading.Condition()

    def maker() -> None:
        with wheel_support._made_once(where) as to_make:
            if to_make:
                with entered:
                    made.append(1)
                    entered.notify_all()
                    entered.wait_for(lambda: len(made) == 4, timeout=1)
                where.mkdir(exist_ok=True)

    threads = [threading.Thread(target=maker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert made == [1]
    assert (where / ".fxd-complete").exists()


def test_a_build_left_half_made_is_made_again(tmp_path: Path) -> None:
    where = tmp_path / "dist"
    where.mkdir()
    (where / "partial.whl").write_text("")  # a maker killed before it marked it complete
    with wheel_support._made_once(where) as to_make:
        assert to_make and not where.exists()
        where.mkdir()
    with wheel_support._made_once(where) as to_make:
        assert not to_make
    assert not (where / "partial.whl").exists()
