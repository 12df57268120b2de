"""A user's own project, outside this repository (issue 21 §1): ``mymod.py`` with their agents
in an otherwise empty directory, fxdurable installed from the built wheel into a fresh venv.

``fxdurable worker`` (forked work horses, and ``--no-fork``'s SimpleWorker), ``fxdurable
serve`` and the Python API all import ``FXD_AGENTS=mymod:agents`` from the working directory,
or from ``--app-dir DIR`` when run from elsewhere, as rq, uvicorn and celery do; a module that
is in neither gives a one-line error naming the directory searched and ``--app-dir``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from redis_support import free_port
from wheel_support import (
    Venv,
    clean_env,
    run,
    run_failing,
    stop_process,
    wait_for_health,
    wheel_venv,
)

pytestmark = [pytest.mark.slow, pytest.mark.redis]

EXTRAS = "http,redis"  # one venv, shared with the other wheel tests that ask for these

USER_MODULE = '''\
"""A user's agents: one tool that notes which process ran it."""

import os
from pathlib import Path

import pydantic

import fxdurable as fx


class Note(pydantic.BaseModel):
    text: str


@fx.tool(replay="unsafe")
def take_note(inp: Note, ctx: fx.ToolContext) -> str:
    """Write a note down."""
    with (Path(__file__).parent / "notes.log").open("a") as log:
        log.write(f"{os.getpid()} {ctx.execution_id} {inp.text}\\n")
    return "noted"


agents = [
    fx.Agent(
        "notes",
        model=fx.ScriptedModel(
            [fx.reply("", fx.call("take_note", text="hello")), fx.reply("Noted.")]
        ),
        tools=[take_note],
    )
]
'''

# The application's side: admit a prompt through the Python API (and, with "wait", wait for
# the worker to settle it). Prints its own pid, the submission's status and result.
SUBMIT = """\
import asyncio, json, os, sys

import fxdurable as fx
from mymod import agents


async def main() -> None:
    store, queue, session, wait = sys.argv[1:]
    async with fx.Runtime(agents, store=store, queue=queue) as rt:
        handle = rt.session(session)
        sub = await handle.submit("Note hello", request_id=session + "-1")
        if wait == "wait":
            sub = await handle.wait(sub.id, timeout=90)
    print(json.dumps({"pid": os.getpid(), "status": str(sub.status), "result": sub.result}))


asyncio.run(main())
"""


def _project(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "mymod.py").write_text(USER_MODULE)
    (where / "submit.py").write_text(SUBMIT)
    return where


def _queue_for(store_url: str) -> str:
    """The RQ queue URL on the store's Redis, named after its key prefix (per test)."""
    parts = urlsplit(store_url)
    prefix = parse_qs(parts.query)["prefix"][0]
    return f"rq://{parts.netloc}{parts.path}?queue={prefix}"


def _submit(venv: Venv, project: Path, store: str, queue: str, session: str, wait: bool) -> dict:
    out = run(
        [str(venv.python), "submit.py", store, queue, session, "wait" if wait else "admit"],
        cwd=project,
        timeout=120,
        what=f"the application's submit ({session})",
    )
    return json.loads(out.strip().splitlines()[-1])


def _notes(project: Path) -> list[list[str]]:
    log = project / "notes.log"
    return [line.split(" ", 2) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.timeout(900)
def test_a_worker_on_redis_runs_the_users_module_from_the_working_directory(
    tmp_path: Path, redis_url: str
) -> None:
    venv = wheel_venv(EXTRAS)
    project = _project(tmp_path / "project")
    queue = _queue_for(redis_url)
    env = clean_env(FXD_STORE=redis_url, FXD_QUEUE=queue, FXD_AGENTS="mymod:agents")
    worker_log, serve_log = tmp_path / "worker.log", tmp_path / "serve.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen(
            [str(venv.exe("fxdurable")), "worker"],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    port = free_port()
    with serve_log.open("wb") as out:
        serve = subprocess.Popen(
            [str(venv.exe("fxdurable")), "serve", "--dev", "--port", str(port)],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # The Python API admits; the worker's forked work horse imports mymod and runs the turn.
        settled = _submit(venv, project, redis_url, queue, "python-api", wait=True)
        assert settled["status"] == "completed" and settled["result"] == "Noted.", settled
        notes = _notes(project)
        assert len(notes) == 1 and notes[0][2] == "hello", notes
        assert int(notes[0][0]) not in (settled["pid"], worker.pid), "not run by a work horse"

        # The HTTP API (fxdurable serve, its agents from FXD_AGENTS in the working directory)
        # admits onto the same queue; the worker runs that turn too.
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, serve, serve_log)
        with httpx.stream(
            "POST", f"{url}/chat", json={"session_id": "http-api", "prompt": "Note hello"},
            timeout=90,
        ) as response:  # fmt: skip
            assert response.status_code == 200, response.read()
            lines = [json.loads(line) for line in response.iter_lines() if line]
        assert lines[-1]["type"] == "turn_end", lines
        assert lines[-1]["data"]["outcome"] == "completed", lines[-1]
        assert len(_notes(project)) == 2, _notes(project)
    finally:
        worker_output = stop_process(worker, worker_log)
        serve_output = stop_process(serve, serve_log)
    assert worker.returncode == 0, f"the worker exited {worker.returncode}:\n{worker_output}"
    assert "Traceback" not in worker_output, worker_output
    assert "Traceback" not in serve_output, serve_output
    assert "serving the demo agent" not in serve_output, serve_output


@pytest.mark.timeout(600)
def test_app_dir_imports_the_module_from_another_directory(tmp_path: Path, redis_url: str) -> None:
    venv = wheel_venv(EXTRAS)
    project = _project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    queue = _queue_for(redis_url)
    admitted = _submit(venv, project, redis_url, queue, "app-dir", wait=False)
    assert admitted["status"] == "queued", admitted

    # From another directory, by a relative --app-dir; the SimpleWorker (--no-fork) runs the
    # job in the worker process itself, so the worker's own import is what found mymod.
    env = clean_env(FXD_STORE=redis_url, FXD_QUEUE=queue, FXD_AGENTS="mymod:agents")
    run(
        [str(venv.exe("fxdurable")), "worker", "--burst", "--no-fork", "--scan-interval", "60",
         "--app-dir", "../project"],
        cwd=elsewhere, env=env, timeout=120, what="fxdurable worker --app-dir --burst",
    )  # fmt: skip
    assert [n[2] for n in _notes(project)] == ["hello"], _notes(project)
    settled = _submit(venv, project, redis_url, queue, "app-dir", wait=True)  # same request id
    assert settled["status"] == "completed" and settled["result"] == "Noted.", settled
    assert list(elsewhere.iterdir()) == [], "the worker wrote into its working directory"


@pytest.mark.timeout(600)
def test_a_module_in_no_searched_directory_is_a_one_line_error(tmp_path: Path) -> None:
    venv = wheel_venv(EXTRAS)
    empty = tmp_path / "empty"
    empty.mkdir()
    _project(tmp_path / "project")
    fxd = str(venv.exe("fxdurable"))
    env = clean_env(
        FXD_STORE=f"sqlite:///{tmp_path / 'x.db'}",
        FXD_QUEUE="rq://127.0.0.1:1/0",  # never reached: the agents load first
        FXD_AGENTS="mymod:agents",
    )
    for command in (["worker"], ["serve", "--dev", "--port", str(free_port())]):
        error = run_failing(
            [fxd, *command], cwd=empty, env=env, timeout=60, what=f"{command[0]}, no mymod"
        )
        # One line (serve's --dev warning may come first: it is logged before the agents load).
        lines = [line for line in error.splitlines() if line and not line.startswith("WARNING ")]
        assert len(lines) == 1 and lines[0].startswith("fxdurable: "), error
        assert "no module named 'mymod' (from FXD_AGENTS=mymod:agents)" in error, error
        assert str(empty.resolve()) in error and "--app-dir DIR" in error, error

    # An --app-dir that does not exist, and FXD_APP_DIR naming the project from anywhere.
    error = run_failing(
        [fxd, "worker", "--app-dir", "nope"], cwd=empty, env=env, timeout=60, what="bad --app-dir"
    )
    assert error.strip() == "fxdurable: --app-dir 'nope' is not a directory", error
    error = run_failing(
        [fxd, "worker", "--agents", "mymod:no_such_list"],
        cwd=empty, env=env | {"FXD_APP_DIR": str(tmp_path / "project")}, timeout=60,
        what="FXD_APP_DIR, a missing attribute",
    )  # fmt: skip
    assert "'mymod' has no attribute 'no_such_list'" in error, error
