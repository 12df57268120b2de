"""SIGKILL on a reasoning model, and the prompt cache survives: the request a recovered turn
makes repeats, byte for byte, the cacheable prefix the dead attempt sent (docs/caching.md),
and carries the reasoning the dead attempt's response streamed.

``driver.py --reasoning`` serves the story in each wire (Chat Completions, Anthropic
Messages, the Responses API) with a server that refuses a follow-up whose reasoning is
missing or altered. The server appends every request body, as sent, to ``requests.jsonl``
before answering it, so the requests of a process that is then killed are kept; the killed
process's server dies with it, and the recovery talks to a fresh one that remembers nothing:
it checks the reasoning against what it derives from the recorded call ids, so only the
journal can have kept it. (This replaces test_crash_reasoning.py, which checked the reasoning
for the two chat wires.)
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from crash_harness import CrashHarness, assert_clean, assert_crashed
from driver import REQUEST_LOG
from test_crash_http_providers import server_runs

from fxdurable.testing.prompt_prefix import conversation_offsets, prefix_before_latest
from fxdurable.testing.wire_common import reasoning_for
from fxdurable.testing.wire_openai_responses import encrypted_for

pytestmark = pytest.mark.crash

REASONING = ["--reasoning"]


@pytest.fixture(params=["openai", "anthropic", "openai-responses"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def requests_by_run(workdir: Path) -> list[list[bytes]]:
    """The raw request bodies each driver process sent, one list per process, in order."""
    runs: dict[int, list[bytes]] = {}
    for line in (workdir / REQUEST_LOG).read_text().splitlines():
        entry = json.loads(line)
        runs.setdefault(entry["pid"], []).append(entry["raw"].encode())
    return list(runs.values())


def conversation(provider: str, raw: bytes) -> list[dict[str, Any]]:
    body = json.loads(raw)
    return list(body["input"] if provider == "openai-responses" else body["messages"])


def reasoning_with(provider: str, raw: bytes, call_id: str) -> str | None:
    """The reasoning a request sends back with the assistant turn that made ``call_id``."""
    items = conversation(provider, raw)
    if provider == "openai":
        for message in items:
            if any(c["id"] == call_id for c in message.get("tool_calls") or ()):
                return str(message["reasoning_content"])
    elif provider == "anthropic":
        for message in items:
            blocks = message["content"] if isinstance(message["content"], list) else []
            if any(b.get("type") == "tool_use" and b.get("id") == call_id for b in blocks):
                return next(str(b["thinking"]) for b in blocks if b.get("type") == "thinking")
    else:  # the last reasoning item before the call's function_call item
        for index, item in enumerate(items):
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                (reasoning, *_) = [i for i in reversed(items[:index]) if i["type"] == "reasoning"]
                assert reasoning["encrypted_content"] == encrypted_for([call_id])
                plain = reasoning["encrypted_content"].split(".")[0]
                return base64.b64decode(plain).decode()
    return None


def assert_repeats_prefix(dead: bytes, recovered: bytes) -> None:
    prefix = prefix_before_latest(dead)
    assert len(conversation_offsets(dead)) >= 2, "a prefix with messages in it"
    assert recovered.startswith(prefix), (
        "the recovered request changed bytes the dead attempt had sent (and cached): "
        f"first difference at byte {_first_difference(prefix, recovered)}"
    )


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))


def test_after_a_tool_ran_the_recovered_request_repeats_the_prefix_and_the_reasoning(
    store_url: str, workdir: Path, provider: str
) -> None:
    crash = CrashHarness(store_url, workdir, provider=provider)
    spec = "tool.after-execute:deploy"
    assert_crashed(crash.run(spec, extra_args=REASONING), spec)
    assert_clean(crash.run(None, extra_args=REASONING), "the run to rest")
    dead, recovery = requests_by_run(workdir)
    # The dead attempt's last request asked for the round that called deploy; the recovery's
    # first one sends that round's answer and the deploy result after it.
    assert_repeats_prefix(dead[-1], recovery[0])
    deploy = crash.world().task("deploy")
    assert deploy.provider_id is not None
    expected = reasoning_for([deploy.provider_id])
    assert reasoning_with(provider, recovery[0], deploy.provider_id) == expected
    assert all(r["status"] == 200 for run in server_runs(workdir) for r in run["requests"])
    assert crash.world().submission().status == "completed"


def test_after_a_response_finished_the_recovered_request_is_the_same_bytes(
    store_url: str, workdir: Path, provider: str
) -> None:
    crash = CrashHarness(store_url, workdir, provider=provider)
    # The first kill leaves two rounds recorded; the second process asks for the next round
    # and dies once its response has finished, before recording it.
    for spec in ("tool.after-execute:charge", "model.after-finish"):
        assert_crashed(crash.run(spec, extra_args=REASONING), spec)
    assert_clean(crash.run(None, extra_args=REASONING), "the run to rest")
    first, second, third = requests_by_run(workdir)
    assert_repeats_prefix(first[-1], second[0])
    (asked,) = second  # died after its one response
    assert third[0] == asked, "the same round, asked again: the very same request bytes"
    charge = crash.world().task("charge")
    assert charge.provider_id is not None
    assert reasoning_with(provider, third[0], charge.provider_id) == reasoning_for(
        [charge.provider_id]
    )
    assert crash.world().submission().status == "completed"
