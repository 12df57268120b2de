"""A worker's first log line says where each provider the agents use will be called, which
variable said so, and whether a key is set: never the key (real ``fxdurable worker``
processes on Redis, as users start them, without -v)."""

from __future__ import annotations

import pytest
from rq_support import RqHarness

pytestmark = pytest.mark.redis

SECRET = "sk-worker-key-NEVER-LOGGED-8812"
AGENTS = """\
import fxdurable as fx

agents = [fx.Agent("local", "openai/llama3"), fx.Agent("claude", "anthropic/claude-x")]
"""


def test_the_rq_workers_first_line_names_each_endpoint_and_variable(rq_harness: RqHarness):
    h = rq_harness
    (h.mods / "endpoint_agents.py").write_text(AGENTS)
    env: dict[str, str | None] = {
        "FXD_AGENTS": "endpoint_agents:agents",
        "OPENAI_BASE_URL": "http://localhost:11434/v1",
        "OPENAI_API_KEY": SECRET,
        "FXD_ANTHROPIC_BASE_URL": "https://gateway.test/anthropic",
        "ANTHROPIC_BASE_URL": "https://ignored.test",
        "ANTHROPIC_API_KEY": None,
        "OPENAI_ORG_ID": None,
        "OPENAI_PROJECT_ID": None,
    }
    code, out, err = h.run_cli("worker", "--burst", "--scan-interval", "60", env=env)
    assert code == 0, (code, out, err)
    first = err.splitlines()[0]
    assert first == (
        "INFO fxdurable.startup: fxdurable worker: model endpoints: "
        "openai http://localhost:11434/v1 (from OPENAI_BASE_URL; key from OPENAI_API_KEY: set); "
        "anthropic https://gateway.test/anthropic (from FXD_ANTHROPIC_BASE_URL; key from "
        "ANTHROPIC_API_KEY: missing)"
    ), err
    assert SECRET not in out + err
