"""A Postgres-only deployment from the built wheel (issue 27): ``pip install
'fxdurable[http,postgres]'`` into a fresh venv (no boto3, no Redis), used from an empty
directory against the test run's own PostgreSQL (tests/postgres_support.py's initdb'd server,
a schema of this test's own): ``fxdurable migrate``, ``fxdurable serve`` and two ``fxdurable
worker --queue postgresql://`` processes on one database; a turn admitted over HTTP runs on a
worker and completes; ``fxdurable check`` finds every invariant holding.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from redis_support import free_port
from wheel_support import clean_env, run, stop_process, wait_for_health, wheel_venv

pytestmark = [pytest.mark.slow]

EXTRAS = "http,postgres"
READY = "listening on Postgres queue"


@pytest.mark.timeout(900)
def test_a_postgres_only_deployment_from_the_wheel_serves_a_turn(
    tmp_path: Path, postgres_url: str
) -> None:
    venv = wheel_venv(EXTRAS)
    work = tmp_path / "work"  # empty but for the user's agents: the source tree is not here
    work.mkdir()
    (work / "myagents.py").write_text("from fxdurable.cli.demo_agent import agents\n")
    fxd = str(venv.exe("fxdurable"))
    missing = run(
        [str(venv.python), "-c", "import importlib.util as u; "
         "print(*(m for m in ('boto3', 'botocore', 'redis', 'rq') if u.find_spec(m)))"],
        cwd=work, timeout=60, what="looking for the other backends' clients",
    )  # fmt: skip
    assert missing.strip() == "", f"fxdurable[{EXTRAS}] installed {missing}"

    migrated = run([fxd, "migrate", postgres_url], cwd=work, timeout=60, what="fxdurable migrate")
    assert migrated.startswith("migrated the schema from version 0 to "), migrated
    token = secrets.token_urlsafe(32)
    env = clean_env(
        FXD_STORE=postgres_url,
        FXD_QUEUE=postgres_url,  # the same database and schema: no Redis, no AWS
        FXD_AGENTS="myagents:agents",
        FXD_HTTP_TOKENS=f"alice={token}",
    )
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [fxd, "-v", *args], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append((proc, log))
        return proc, log

    try:
        workers = [start(f"worker-{n}", "worker", "--concurrency", "2") for n in (1, 2)]
        port = free_port()
        serve, serve_log = start("serve", "serve", "--port", str(port))
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, serve, serve_log)
        for proc, log in workers:  # a worker may still be starting once serve answers
            deadline = time.monotonic() + 60
            while READY not in log.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, f"no {READY!r}: {log.read_text()}"
                time.sleep(0.05)
            assert proc.poll() is None and READY in log.read_text(), log.read_text()

        with httpx.stream(
            "POST", f"{url}/chat", json={"prompt": "Ship release 1.4 to production."},
            headers={"Authorization": f"Bearer {token}"}, timeout=120,
        ) as response:  # fmt: skip
            assert response.status_code == 200, response.read()
            session = response.headers["X-Fxd-Session-Id"]
            lines = [json.loads(line) for line in response.iter_lines() if line]
        assert lines[0]["type"] == "turn_start" and lines[-1]["type"] == "turn_end", lines
        assert lines[-1]["data"]["outcome"] == "completed", lines[-1]
    finally:
        # SIGTERM: a worker finishes the wake it holds (its lease release and delete follow
        # the turn's end a moment later) and logs it before it exits.
        outputs = [(proc, stop_process(proc, log)) for proc, log in procs]
    for proc, output in outputs:
        # uvicorn re-raises SIGTERM on itself after a graceful stop (-15); a worker exits 0.
        assert proc.returncode in (0, -15), f"{proc.args} exited {proc.returncode}:\n{output}"
        assert "Traceback" not in output and "boto" not in output, output
    # The queue names the session by its key (the principal, then the id the caller sees).
    ran = [output for _, output in outputs[:2] if f"wake alice/{session} (" in output]
    assert len(ran) == 1, f"not one worker ran the turn: {[o for _, o in outputs[:2]]}"

    check = run([fxd, "check", "--store", postgres_url], cwd=work, timeout=120, what="check")
    assert "every invariant holds" in check, check
