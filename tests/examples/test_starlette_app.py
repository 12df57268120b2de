"""``examples/starlette_app`` as a user runs it: copied into an empty directory, the wheel
installed with the ``http`` extra, the README's exports run, ``uvicorn app:app`` started by
the venv's uvicorn from that directory, and the README's curl lines run verbatim (the port
aside: a free one instead of 8000), with a scripted model served as the OpenAI-compatible
provider."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples_support import EXTRAS, copy_example, exported, ok, readme_block, run_line, user_env
from redis_support import free_port
from wheel_support import wheel_venv

from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import call, reply, turn_messages
from fxdurable.testing.model_server import Quirks, ScriptedModelServer

EXAMPLE = "starlette_app"
TEST_ID = (
    "tests/examples/test_starlette_app.py::test_the_app_serves_its_keys_principals_and_nobody_else"
)
KEY = "sk-test-support-0123456789"
README_PORT = "8000"

pytestmark = pytest.mark.slow


def support_policy(request: ModelRequest) -> ModelResponse:
    turn = turn_messages(request)
    results = [m for m in turn if m.role == "tool"]
    if not results:
        return reply("Let me look that up.", call("order_status", order_id="7"))
    return reply(f"Your order 7 is {results[-1].text}.")


def started(proc: subprocess.Popen[str], mark: str, timeout: float = 30) -> str:
    """What the server printed until ``mark``; fails with it all if it exits or times out."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while mark not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            pytest.fail(f"uvicorn did not start (exit {proc.poll()}):\n{seen}")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            seen += proc.stdout.readline()
    return seen


def lines_of(stream: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.splitlines() if line.strip()]


@pytest.fixture
def scripted_provider() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(support_policy, quirks=Quirks(require_api_key=KEY)) as server:
        yield server


def test_the_app_serves_its_keys_principals_and_nobody_else(
    tmp_path: Path, scripted_provider: ScriptedModelServer
) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    venv = wheel_venv(EXTRAS)
    port = str(free_port())
    lines = [line.replace(README_PORT, port) for line in readme_block(EXAMPLE, TEST_ID)]
    exports = [line for line in lines if line.startswith("export ")]
    serve, *curls = lines[len(exports) :]
    assert serve.startswith("uvicorn app:app") and all(c.startswith("curl ") for c in curls)
    provider = {
        "OPENAI_BASE_URL": scripted_provider.openai_base_url,
        "OPENAI_API_KEY": KEY,
        "AGENT_MODEL": "openai/scripted-support",
    }
    env = exported(exports, cwd=project, env=user_env(venv, **provider))
    server = subprocess.Popen(
        ["bash", "-c", serve],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        started(server, "Application startup complete")
        me, chat, history, bobs_look, wrong_key, no_key = (
            ok(run_line(curl, cwd=project, env=env)) for curl in curls
        )
        # The same URLs, for the status codes the README's bodies stand for.
        base = f"http://127.0.0.1:{port}"
        for headers, status in (({"x-api-key": env["BOB_KEY"]}, 404), ({}, 401)):
            got = httpx.get(f"{base}/agent/sessions/order-7", headers=headers)
            assert got.status_code == status, got.text
        assert httpx.get(f"{base}/me").status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            rest, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            raise
    # uvicorn re-raises the SIGTERM it handled: killed by it, after a clean shutdown.
    assert server.returncode == -signal.SIGTERM, rest
    assert "Application shutdown complete" in rest

    assert json.loads(me) == {"principal": "alice", "agents": ["support"]}
    turn = lines_of(chat)
    assert turn[0]["type"] == "turn_start" and turn[0]["sessionId"] == "order-7"
    assert turn[-1]["type"] == "turn_end", turn[-1]
    assert turn[-1]["data"]["outcome"] == "completed"
    assert turn[-1]["data"]["text"] == "Your order 7 is shipped on Monday, arriving Thursday."
    assert any(
        line["type"] == "tool.completed" and line["data"]["tool"] == "order_status" for line in turn
    )
    assert "Where is my order 7?" in history
    assert json.loads(bobs_look)["code"] == "session_not_found"
    assert json.loads(wrong_key)["code"] == "unauthorized"
    assert json.loads(no_key)["code"] == "unauthorized"
    assert {r.status for r in scripted_provider.requests} == {200}
