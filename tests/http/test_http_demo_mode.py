"""``fxdurable serve --dev --demo`` with real processes: the server admits and streams, a
separate worker process runs the turn, ``POST /demo/crash`` SIGKILLs that worker mid-deploy and
starts another, and the turn completes on its own with the deploy done once. And ``fxdurable
demo`` ends with the command that opens its session in the console, which works as printed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_lines import parsed
from redis_support import free_port

from fxdurable.testing.net import wait_healthy

REPO = Path(__file__).resolve().parents[2]
FXDURABLE = Path(sys.executable).parent / "fxdurable"  # the venv's command, as make demo runs it
PROMPT = "Ship release 1.4 to production."
TIMEOUT = httpx.Timeout(30.0)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **extra}


class _Server:
    """A ``fxdurable serve`` in its own process group (its worker is in it too), stopped by
    killing the group."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.log = cwd / "serve.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, url: str) -> None:
        wait_healthy(f"{url}/healthz", self.proc, timeout_s=20, output=self.log.read_text)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    started: list[_Server] = []
    yield started
    for server in started:
        server.kill()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_crash_of_the_worker_mid_deploy_is_recovered_and_deploys_once(tmp_path, servers):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(FXDURABLE), "serve", "--dev", "--demo", "--db", "demo.db", "--port", str(port)]
    # One second per tool call: the crash lands while deploy runs, whatever the machine.
    server = _Server(command, tmp_path, _env(FXD_DEMO_PACE_S="1"))
    servers.append(server)
    server.wait_ready(url)
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        first = client.get("/demo").json()
        assert first["demo"] is True and first["worker"] != server.proc.pid
        with client.stream("POST", "/chat", json={"sessionId": "ship", "prompt": PROMPT}) as stream:
            assert stream.status_code == 200
            lines = parsed(stream)
            seen = []
            for line in lines:
                seen.append(line)
                if line["type"] == "tool.started" and line["data"]["tool"] == "deploy":
                    break
            crash = client.post("/demo/crash")
            assert crash.status_code == 200, crash.text
            seen += list(lines)  # the same stream: the server stayed up
        killed, replacement = crash.json()["killed"], crash.json()["worker"]
        assert killed == first["worker"] and replacement != killed
        assert not _process_exists(killed)
        assert client.get("/demo").json()["worker"] == replacement

    types = [line["type"] for line in seen]
    assert types[-1] == "turn_end" and seen[-1]["data"]["outcome"] == "completed", types
    assert "attempt.interrupted" in types and "tool.outcome_unknown" in types, types
    tools = [line["data"]["tool"] for line in seen if line["type"] == "tool.started"]
    assert tools[:2] == ["run_tests", "deploy"] and "check_deployment" in tools, tools
    cursors = [line["cursor"] for line in seen]
    assert cursors == sorted(set(cursors)), "a line came twice or out of order"
    deploys = (tmp_path / "deployments.log").read_text().splitlines()  # demo.db's ledger
    assert len(deploys) == 1, deploys
    # The worker that ran the first attempt is the one that was killed.
    attempts = [line["data"]["worker"] for line in seen if line["type"] == "attempt.started"]
    assert attempts[0].endswith(f":{killed}") and attempts[-1].endswith(f":{replacement}")


def test_demo_routes_exist_in_demo_mode_only_and_demo_needs_dev(tmp_path, servers):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _Server(
        [str(FXDURABLE), "serve", "--dev", "--db", "plain.db", "--port", str(port)],
        tmp_path,
        _env(),
    )
    servers.append(server)
    server.wait_ready(url)
    assert httpx.get(f"{url}/demo").status_code == 404
    assert httpx.post(f"{url}/demo/crash").status_code == 404

    refused = subprocess.run(
        [str(FXDURABLE), "serve", "--demo", "--db", "x.db", "--port", str(free_port())],
        cwd=tmp_path,
        env=_env(FXD_HTTP_TOKENS="alice=alice-token-0123456789abcdef"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0 and "--demo needs --dev" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_make_demo_ends_with_the_command_that_opens_its_session_in_the_console(tmp_path, servers):
    demo = subprocess.run(
        [str(FXDURABLE), "demo"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    *_, command_line, url_line = demo.stdout.splitlines()
    command = shlex.split(command_line)
    assert command[:4] == [str(FXDURABLE), "serve", "--dev", "--demo"], command_line
    assert url_line.strip().startswith("then open http://127.0.0.1:8000/console/#/sessions/")
    console_url = url_line.split("then open ", 1)[1]
    session = console_url.rsplit("/", 1)[1]

    port = free_port()  # the printed command on a free port instead of 8000
    server = _Server([*command, "--port", str(port)], tmp_path, _env())
    servers.append(server)
    url = console_url.replace(":8000", f":{port}")
    base = url.split("/console/", 1)[0]
    server.wait_ready(base)
    page = httpx.get(url.split("#", 1)[0])
    assert page.status_code == 200 and "<html" in page.text.lower()
    reply = httpx.get(f"{base}/sessions/{session}")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["sessionId"] == "engineer" and body["submissions"][0]["status"] == "completed"
    listed = httpx.get(f"{base}/sessions").json()["sessions"]
    assert [s["id"] for s in listed] == ["engineer"] and listed[0]["lastOutcome"] == "completed"
    assert json.loads(httpx.get(f"{base}/demo").text)["demo"] is True
    # The console may go on with it: a follow-up prompt runs in the demo's worker, without an
    # owner as the demo's own turns, and deploys nothing more.
    with httpx.stream(
        "POST",
        f"{base}/chat",
        json={"sessionId": session, "prompt": "Is release 1.4 live in production?"},
        timeout=TIMEOUT,
    ) as stream:
        lines = list(parsed(stream))
    assert lines[-1]["type"] == "turn_end" and lines[-1]["data"]["outcome"] == "completed"
    assert "production runs release 1.4" in lines[-1]["data"]["text"]
    assert [s["id"] for s in httpx.get(f"{base}/sessions").json()["sessions"]] == ["engineer"]
    assert len((tmp_path / ".fxd-demo" / "deployments.log").read_text().splitlines()) == 1


# -- the demo tells the truth in any order (issue 21 §5) --------------------------------------


def _demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FXDURABLE), "demo", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )


def _crash_walkthrough(cwd: Path) -> None:
    """The README's kill -9 walkthrough: crash right after the deploy ran, then recover."""
    crashed = _demo(cwd, "--crash-at", "tool.after-execute:deploy")
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr  # SIGKILL
    recovered = _demo(cwd)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr


def _console_crash_mid_deploy(cwd: Path, servers: list[_Server], session: str) -> None:
    """``serve --dev --demo`` on the demo's store (the command make demo prints), the crash
    button pressed while the deploy runs, the turn followed to its end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(FXDURABLE), "serve", "--dev", "--demo", "--db", ".fxd-demo/demo.db"]
    server = _Server([*command, "--port", str(port)], cwd, _env(FXD_DEMO_PACE_S="2"))
    servers.append(server)
    server.wait_ready(url)
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        body = {"sessionId": session, "prompt": PROMPT}
        with client.stream("POST", "/chat", json=body) as stream:
            lines = parsed(stream)
            for line in lines:
                if line["type"] == "tool.started" and line["data"]["tool"] == "deploy":
                    break
            assert client.post("/demo/crash").status_code == 200
            last = list(lines)[-1]
    assert last["type"] == "turn_end" and last["data"]["outcome"] == "completed", last
    server.kill()


def _assert_claims_follow_the_ledger(cwd: Path) -> dict[str, bool]:
    """For each session with an interrupted deploy: the model says it completed exactly when
    the ledger holds that call's execution id, and that it never ran exactly when it does not.
    Returns, per session, whether the interrupted deploy had run."""
    from fxdurable.cli.demo_ledger import read_ledger
    from fxdurable.core.states import ToolTaskStatus
    from fxdurable.stores.sqlite import SqliteStore

    ledger = read_ledger(cwd / ".fxd-demo" / "deployments.log")
    on_record = [entry.execution for entry in ledger]
    store = SqliteStore(f"sqlite:///{cwd / '.fxd-demo' / 'demo.db'}", create=False)

    def read(view: Any) -> dict[str, tuple[list[Any], str]]:
        return {
            session.id: (
                [t for t in view.session_tool_tasks(session.id) if t.tool == "deploy"],
                " ".join(m.text for m in view.messages(session.id) if m.role == "assistant"),
            )
            for session in view.list_sessions()
        }

    try:
        sessions = store.read(read)
    finally:
        store.close()
    ran: dict[str, bool] = {}
    for session_id, (tasks, said) in sessions.items():
        (interrupted,) = [t for t in tasks if t.status == ToolTaskStatus.OUTCOME_UNKNOWN]
        ran[session_id] = interrupted.execution_id in on_record
        if ran[session_id]:
            assert "The interrupted deploy did complete" in said, said
            assert "never ran" not in said, said
        else:
            assert "never ran" in said, said
            assert "did complete" not in said, said
    # Every line is one deploy call that really ran, once; no line without its call.
    executions = {t.execution_id for tasks, _ in sessions.values() for t in tasks}
    assert sorted(on_record) == sorted(set(on_record)), ledger
    assert set(on_record) <= executions, (on_record, executions)
    return ran


@pytest.mark.slow
def test_demo_then_console_crash_the_model_claims_what_the_ledger_says(tmp_path, servers):
    """make demo's walkthrough, then the console's crash button on the same store: the second
    deploy never ran, and the model says so (it said 'did complete' before, from the ledger
    of the demo's first deploy)."""
    _crash_walkthrough(tmp_path)
    _console_crash_mid_deploy(tmp_path, servers, "ship")
    ran = _assert_claims_follow_the_ledger(tmp_path)
    assert ran == {"engineer": True, "dev/ship": False}, ran
    lines = (tmp_path / ".fxd-demo" / "deployments.log").read_text().splitlines()
    assert len(lines) == 2, "the walkthrough's deploy and the console's deliberate redeploy"


@pytest.mark.slow
def test_console_crash_then_demo_the_model_claims_what_the_ledger_says(tmp_path, servers):
    _console_crash_mid_deploy(tmp_path, servers, "ship")
    _crash_walkthrough(tmp_path)
    ran = _assert_claims_follow_the_ledger(tmp_path)
    assert ran == {"dev/ship": False, "engineer": True}, ran
    assert len((tmp_path / ".fxd-demo" / "deployments.log").read_text().splitlines()) == 2


def test_each_store_keeps_its_own_ledger(tmp_path: Path) -> None:
    from fxdurable.cli.demo_ledger import ledger_path

    demo = tmp_path / ".fxd-demo"
    assert ledger_path(demo, f"sqlite:///{demo}/demo.db") == demo / "deployments.log"
    assert ledger_path(demo, "sqlite:///other/x.db?synchronous=NORMAL") == Path(
        "other/x.deployments.log"
    )
    redis = ledger_path(demo, "redis://:pw@127.0.0.1:6379/0")
    assert redis.parent == demo and redis.name.startswith("deployments-redis-127.0.0.1-6379-0-")
    assert "pw" not in redis.name
    assert ledger_path(demo, "redis://127.0.0.1:6379/1") != ledger_path(
        demo, "redis://127.0.0.1:6379/0"
    )
    assert ledger_path(demo, "dynamodb://t?endpoint_url=http://a") != ledger_path(
        demo, "dynamodb://t?endpoint_url=http://b"
    )
