"""Test the artifact, not the source (DESIGN §9): build the wheel, install it in a fresh venv,
and use it from a directory where the source tree cannot be imported by accident.

The wheel and its venvs come from tests/wheel_support.py (built once per test process, one
venv per extras set, shared with the other wheel tests): bare (``fxdurable serve`` must say to
install the http extra), with ``[http,redis]`` (``fxdurable serve`` must refuse to start
without credentials, then serve a turn with ``--dev``), with ``[aws]`` (a worker on SQS runs a
turn on DynamoDB, both on the test run's moto server, its agents from the user's module in
its working directory).

Needs the ``build`` package in the test venv and an index to install pydantic, httpx, starlette
and uvicorn from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from redis_support import free_port
from wheel_support import (
    REPO,
    built_wheel,
    clean_env,
    run,
    run_failing,
    stop_process,
    wait_for_health,
    wheel_venv,
)

from fxdurable import __version__

# The http extra (what the serve test needs) with redis: the venv tests/e2e/test_user_project.py
# uses, so one test process installs it once.
HTTP_EXTRAS = "http,redis"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_built_wheel_works_in_a_fresh_venv(tmp_path: Path) -> None:
    with zipfile.ZipFile(built_wheel()) as zf:
        names = set(zf.namelist())
    assert "fxdurable/py.typed" in names, "py.typed missing from the wheel: types would not ship"
    for script in ("commit.lua", "read.lua"):
        assert f"fxdurable/stores/lua/{script}" in names, "the Redis store's Lua scripts must ship"
    assert "fxdurable/testing/invariants.py" in names
    assert "fxdurable/http/app.py" in names
    for asset in ("index.html", "app.js", "style.css"):
        assert f"fxdurable/console/static/{asset}" in names, "the web console must ship"
    assert not any(n.startswith(("tests/", "bench/")) for n in names), sorted(names)

    venv = wheel_venv()
    py, fxd = venv.python, venv.exe("fxdurable")

    work = tmp_path / "work"  # not the repo: the source tree is not importable from here
    work.mkdir()
    version = run([str(fxd), "--version"], cwd=work, timeout=60, what="fxdurable --version")
    assert version.strip() == f"fxdurable {__version__}"

    where = run(
        [str(py), "-c", "import fxdurable, fxdurable.testing; print(fxdurable.__file__)"],
        cwd=work,
        timeout=60,
        what="importing the installed package",
    )
    module = Path(where.strip()).resolve()
    assert module.is_relative_to(venv.root.resolve()), f"imported {module}, not the installed wheel"
    assert not module.is_relative_to(REPO), f"imported the source tree: {module}"

    demo = run(
        [str(fxd), "demo", "--dir", "D"], cwd=work, timeout=120, what="fxdurable demo (wheel)"
    )
    assert "Outcome: completed" in demo, demo
    assert "serve --dev --demo --db D/demo.db" in demo.splitlines()[-2], demo
    assert (work / "D" / "demo.db").is_file()
    check = run(
        [str(fxd), "check", "--db", "D/demo.db", "--at-rest"],
        cwd=work,
        timeout=60,
        what="fxdurable check (wheel)",
    )
    assert check.startswith("ok: "), check

    # Without the http extra, serve says what to install (exit 2, no traceback).
    serve = run_failing(
        [str(fxd), "serve", "--dev"], cwd=work, timeout=60, what="fxdurable serve (no extra)"
    )
    assert "pip install 'fxdurable[http]'" in serve, serve


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_with_the_http_extra_serves_a_turn(tmp_path: Path) -> None:
    fxd = wheel_venv(HTTP_EXTRAS).exe("fxdurable")
    work = tmp_path / "work"
    work.mkdir()

    usage = run([str(fxd), "serve", "--help"], cwd=work, timeout=60, what="serve --help")
    assert "--dev" in usage and "--tokens-file" in usage and "--demo" in usage, usage

    # No tokens and no --dev: refuse to start, and say both ways out.
    port = free_port()
    refused = run_failing(
        [str(fxd), "serve", "--port", str(port)], cwd=work, timeout=60, what="serve, no tokens"
    )
    assert "FXD_HTTP_TOKENS" in refused and "--dev" in refused, refused

    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(fxd), "serve", "--dev", "--port", str(port)],
            cwd=work,
            env=clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, proc, log)
        health = httpx.get(f"{url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json() == {"status": "ok"}

        # One turn of the demo agent (the default), streamed from turn_start to turn_end.
        with httpx.stream(
            "POST", f"{url}/chat", json={"prompt": "Ship release 1.4 to production."}, timeout=60
        ) as response:
            assert response.status_code == 200, response.read()
            lines = [json.loads(line) for line in response.iter_lines() if line]
        assert lines[0]["type"] == "turn_start", lines
        assert lines[-1]["type"] == "turn_end", lines
        assert lines[-1]["data"]["outcome"] == "completed", lines[-1]

        # The web console, from the installed package's files.
        page = httpx.get(f"{url}/console/", timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "not installed" not in page.text, "the console's files did not ship"
        module = httpx.get(f"{url}/console/app.js", timeout=10)
        assert module.headers["content-type"] == "text/javascript; charset=utf-8"
        shipped = REPO / "fxdurable" / "console" / "static" / "app.js"
        assert module.text == shipped.read_text()
        assert httpx.get(f"{url}/", timeout=10).status_code == 307  # --dev: to the console
    finally:
        output = stop_process(proc, log)
    # A graceful stop: uvicorn finishes, then re-raises SIGTERM on itself (so -15, or 0).
    assert proc.returncode in (0, -signal.SIGTERM), f"serve exited {proc.returncode}:\n{output}"
    assert "Finished server process" in output and "Traceback" not in output, output
    assert (work / ".fxd" / "fxd.db").is_file()  # the embedded store, in the working directory


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_with_the_aws_extra_runs_a_turn_on_sqs_and_dynamodb(
    tmp_path: Path, moto_server: str, serial_moto_server: str
) -> None:
    """``pip install 'fxdurable[aws]'``, then the deployment page's local AWS walkthrough with the
    installed commands: a worker on an SQS queue runs the demo's turn on a DynamoDB table."""
    from aws_support import REGION, aws_environment, aws_session

    bin_dir = wheel_venv("aws").bin
    work = tmp_path / "work"
    work.mkdir()
    # The worker's agents are the user's module in its working directory (issue 21: the SQS
    # worker imports FXD_AGENTS from there, as the RQ worker does), here the demo's agents.
    (work / "myagents.py").write_text("from fxdurable.cli.demo_agent import agents\n")
    name = f"wheel-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    sqs = aws_session().client("sqs", endpoint_url=moto_server)
    sqs.create_queue(QueueName=name)
    sqs.close()
    # The table on the serial server (its worker's heartbeat and turn write at once), the
    # queue on the threaded one (a long poll would hold the serial one): tests/conftest.py.
    store = f"dynamodb://{name}?region={REGION}&endpoint_url={serial_moto_server}"
    queue = f"sqs://{name}?region={REGION}&endpoint_url={moto_server}"
    env = clean_env() | aws_environment(tmp_path)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(bin_dir / "fxdurable"), "worker", "--queue", queue, "--store", store,
             "--agents", "myagents:agents"],
            cwd=work, env=env | {"FXD_SQS_WAIT_S": "1"}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        demo = subprocess.run(
            [str(bin_dir / "fxdurable"), "demo", "--store", store, "--queue", queue],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stdout + demo.stderr + log.read_text()
        assert "Outcome: completed" in demo.stdout, demo.stdout + log.read_text()
        check = subprocess.run(
            [str(bin_dir / "fxdurable"), "check", "--store", store],
            cwd=work, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert check.returncode == 0 and "every invariant holds" in check.stdout, check
    finally:
        output = stop_process(worker, log)
    assert worker.returncode == 0, f"the worker exited {worker.returncode}:\n{output}"
    assert "Traceback" not in output, output
