"""The stored workspace across real processes, on every store: a worker SIGKILLed after
``edit_file`` executed but before its result was recorded (``tool.after-execute:edit_file``)
leaves nothing applied; the next process (a worker move) recovers the turn on the files the
first one committed, applies the edit exactly once and finishes it.

SQLite, Redis (the embedded runtime on a ``redis://`` store) and DynamoDB on moto."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable import tools as fxt
from fxdurable.backends import open_store
from fxdurable.core.store import Store
from fxdurable.testing import check_store

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("stored_driver.py")
SESSION = "ws"
APP = "def answer():\n    return 1\n"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("dynamodb", marks=pytest.mark.aws),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/ws.db"
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    from dynamo_support import dynamo_url

    return dynamo_url(request.getfixturevalue("serial_moto_server"))  # processes race


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    from aws_support import aws_environment

    base = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "AWS_"))}
    return {**base, **aws_environment(tmp_path), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def store(store_url: str, env: dict[str, str]) -> Iterator[Store]:
    from aws_support import aws_session

    if store_url.startswith("dynamodb://"):
        from fxdurable.stores.dynamodb import DynamoStore

        opened: Store = DynamoStore(store_url, session=aws_session())
    else:
        opened = open_store(store_url)
    yield opened
    opened.close()


def run_driver(
    store_url: str, template: Path, env: dict[str, str], crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    extra = {} if crash_at is None else {"FXD_CRASH_AT": crash_at}
    return subprocess.run(
        [sys.executable, str(DRIVER), "--store", store_url, "--template", str(template)],
        cwd=REPO,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.crash
def test_a_killed_edit_is_applied_once_by_the_next_process_on_every_store(
    tmp_path: Path, store_url: str, store: Store, env: dict[str, str]
) -> None:
    template = tmp_path / "template"
    template.mkdir()
    (template / "app.py").write_text(APP)

    crashed = run_driver(store_url, template, env, crash_at="tool.after-execute:edit_file")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert "crash injected at tool.after-execute:edit_file" in crashed.stderr
    ws = fxt.stored(template)
    # Nothing of the edit was committed; the first half's write was.
    assert ws.files_of(store, SESSION) == {
        "app.py": APP.encode(),
        "notes.txt": b"hello from the first half\n",
    }

    moved = run_driver(store_url, template, env)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert moved.stdout.strip() == "completed done"
    files = ws.files_of(store, SESSION)
    fixed = "def answer():\n    return 2\n"
    assert files == {
        "app.py": fixed.encode(),
        "notes.txt": b"hello from the first half\n",
        "combined.txt": (fixed + "hello from the first half\n").encode(),
    }

    def edit_tasks(view):  # type: ignore[no-untyped-def]
        subs = view.submissions(SESSION)
        return [t for t in view.tool_tasks(subs[0].id) if t.tool == "edit_file"]

    (edit,) = store.read(edit_tasks)
    assert edit.status.value == "completed"
    assert edit.result == "edited app.py: replaced 1 occurrence"  # applied fresh, once
    assert edit.runs == 2  # run by the killed process, then by the next one
    summary = store.read(lambda view: check_store(view, now=time.time(), at_rest=True))
    assert summary.violations == ()
