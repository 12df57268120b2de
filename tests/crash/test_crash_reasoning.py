"""SIGKILL after a tool ran, on a reasoning model: the recovered request carries the reasoning
the dead attempt's response streamed, byte for byte.

``driver.py --reasoning`` serves the story with ``Quirks(reasoning=True)``: every response
streams reasoning (Anthropic ``thinking`` + ``signature_delta`` and ``redacted_thinking``;
DeepSeek ``reasoning_content`` and Gemini thought signatures on the OpenAI wire), and the
server refuses (400) a follow-up whose reasoning is missing or altered. The process that
received it is killed at ``tool.after-execute:deploy``; its server dies with it. The recovery
starts a fresh server, which holds no state: it checks the reasoning against what it derives
from the recorded call ids, so only the journal can have kept it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_harness import CrashHarness, assert_clean, assert_crashed
from test_crash_http_providers import server_runs

from fxdurable.testing.wire_common import reasoning_for

pytestmark = pytest.mark.crash

REASONING = ["--reasoning"]


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def reasoning_of(provider: str, message: dict) -> str | None:
    if provider == "openai":
        value = message.get("reasoning_content")
        return value if isinstance(value, str) else None
    blocks = [b for b in message["content"] if isinstance(b, dict)]
    thinking = [b["thinking"] for b in blocks if b.get("type") == "thinking"]
    return thinking[-1] if thinking else None


def call_ids(provider: str, message: dict) -> list[str]:
    if provider == "openai":
        return [c["id"] for c in message.get("tool_calls") or ()]
    return [b["id"] for b in message["content"] if b.get("type") == "tool_use"]


def test_the_recovered_request_carries_the_same_reasoning(
    store_url: str, workdir: Path, provider: str
) -> None:
    crash = CrashHarness(store_url, workdir, provider=provider)
    spec = "tool.after-execute:deploy"
    assert_crashed(crash.run(spec, extra_args=REASONING), spec)
    assert_clean(crash.run(None, extra_args=REASONING), "the run to rest")
    world = crash.world()
    deploy = world.task("deploy")

    (recovery, *_) = server_runs(workdir)  # the killed run wrote nothing: this is the recovery
    first = recovery["requests"][0]
    assert first["status"] == 200, first  # the reasoning server accepted the history
    assistants = [
        m
        for m in first["body"]["messages"]
        if m["role"] == "assistant" and deploy.provider_id in call_ids(provider, m)
    ]
    (message,) = assistants
    # What the dead attempt's response streamed for this round, derived from the call ids the
    # journal recorded from that stream: the same bytes, back on the wire.
    expected = reasoning_for(call_ids(provider, message))
    assert reasoning_of(provider, message) == expected
    assert all(r["status"] == 200 for run in server_runs(workdir) for r in run["requests"])
    assert world.submission().status == "completed", world.submission()
