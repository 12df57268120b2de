"""Prompt caching (docs/caching.md): breakpoints and cache keys in the request, cached and
reasoning token counts in usage and pricing, and a cacheable prefix that every step of a turn
repeats byte for byte, through the real httpx client against the scripted wire server."""

from __future__ import annotations

import io
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pydantic
import pytest
from provider_e2e_support import fresh_store, of_type, run, runtime

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.recordcodec import decode, encode
from fxdurable.core.records import ModelCallRecord, ToolCallRequest, Usage
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from fxdurable.runtime.models.anthropic import build_anthropic_body
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from fxdurable.runtime.models.caching import PromptCache
from fxdurable.testing.model_server import Quirks, ScriptedModelServer
from fxdurable.testing.prompt_prefix import conversation_offsets, prefix_before_latest

WIRES = ("openai", "anthropic", "openai-responses")
CONTROL = {"type": "ephemeral"}
TOOLS = [
    ToolSpec(name="a_tool", description="A", parameters={"type": "object"}),
    ToolSpec(name="b_tool", description="B", parameters={"type": "object"}),
]


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- usage and pricing ---------------------------------------------------------------------


def test_a_record_written_before_the_cache_fields_decodes_with_zero() -> None:
    old = '{"turn_id":"t","round":0,"status":"completed","text":"hi","created_at":1.0,'
    old += '"usage":{"input_tokens":5,"output_tokens":2,"cost_usd":null}}'
    usage = decode(ModelCallRecord, old).usage
    assert usage == Usage(input_tokens=5, output_tokens=2)
    assert (usage.cache_read_tokens, usage.cache_creation_tokens, usage.reasoning_tokens) == (
        0,
        0,
        0,
    )
    kept = Usage(input_tokens=9, cache_read_tokens=4, cache_creation_tokens=3, reasoning_tokens=2)
    record = decode(ModelCallRecord, old.replace('"usage":{', '"usage":{"x":1,'))
    assert decode(ModelCallRecord, encode(replace(record, usage=kept))).usage == kept


def test_cache_reads_and_writes_are_priced_apart_and_cost_stays_the_total() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=600_000,
        cache_creation_tokens=300_000,
    )
    # Sonnet's list prices: $3 in, $15 out, reads 0.1x, 5-minute writes 1.25x.
    priced = fx.Pricing(
        input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3, cache_write_per_mtok=3.75
    )
    assert priced.cost_usd(usage) == pytest.approx(0.3 + 0.18 + 1.125 + 1.5)
    # Unset cache prices charge the input price: the cost of a call without caching.
    plain = fx.Pricing(input_per_mtok=3.0, output_per_mtok=15.0)
    assert plain.cost_usd(usage) == pytest.approx(3.0 + 1.5)
    with pytest.raises(fx.ConfigurationError):
        fx.Pricing(input_per_mtok=1.0, output_per_mtok=1.0, cache_read_per_mtok=-1.0)


# -- what the request asks to cache --------------------------------------------------------


def _conversation() -> list[ChatMessage]:
    call = ToolCallRequest(
        name="a_tool",
        arguments="{}",
        provider_id="toolu_1",
        wire="anthropic",
        parts=(
            {"type": "thinking", "thinking": "Hm.", "signature": "c2ln"},
            {"type": "tool_use", "id": "toolu_1", "name": "a_tool", "input": {}},
        ),
    )
    return [
        ChatMessage(role="user", text="first"),
        ChatMessage(role="assistant", text="", tool_calls=(call,)),
        ChatMessage(role="tool", text="done", tool_call_id="toolu_1"),
    ]


def _breakpoints(body: dict[str, Any]) -> list[str]:
    """Where ``cache_control`` markers are: ``tools[i]``, ``system[i]``, ``messages[i][j]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list):
            found += [f"messages[{i}][{j}]" for j, b in enumerate(content) if "cache_control" in b]
    return found


def test_anthropic_marks_the_tools_the_system_prompt_and_the_latest_message() -> None:
    request = ModelRequest(instructions="Be brief.", messages=_conversation(), tools=TOOLS)
    body = build_anthropic_body("m", request, max_tokens=10, cache=PromptCache())
    assert _breakpoints(body) == ["tools[1]", "system[0]", "messages[2][0]"]
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": CONTROL}]
    assert list(body) == ["model", "max_tokens", "stream", "tools", "system", "messages"]
    # The recorded parts are copies on the wire: marking never edits the journal's record.
    assert "cache_control" not in request.messages[1].tool_calls[0].parts[1]

    one_hour = build_anthropic_body("m", request, max_tokens=10, cache=PromptCache(ttl="1h"))
    assert one_hour["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    only_system = PromptCache(tools=False, latest_message=False)
    assert _breakpoints(build_anthropic_body("m", request, max_tokens=10, cache=only_system)) == [
        "system[0]"
    ]


def test_a_thinking_block_is_never_marked() -> None:
    # A paused turn's continuation ends on the assistant's own blocks; the API refuses a
    # breakpoint on thinking, so it goes on the newest block that may carry one.
    messages = [*_conversation()[:2]]
    body = build_anthropic_body(
        "m", ModelRequest(instructions="", messages=messages), max_tokens=10, cache=PromptCache()
    )
    assert body["messages"][-1]["content"][0]["type"] == "thinking"
    assert _breakpoints(body) == ["messages[1][1]"]


def test_the_off_switch_sends_no_breakpoint_and_no_cache_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = ModelRequest(
        instructions="Be brief.", messages=_conversation(), tools=TOOLS, session_id="s-1"
    )
    off = AnthropicModel("m", base_url="http://x", prompt_cache=False)
    assert "cache_control" not in json.dumps(off._body(request))
    assert "cache_control" in json.dumps(AnthropicModel("m", base_url="http://x")._body(request))
    assert "prompt_cache_key" not in OpenAIModel(
        "m", base_url="http://x", prompt_cache=False
    )._body(request)
    monkeypatch.setenv("FXD_PROMPT_CACHE", "off")  # models built without prompt_cache=
    assert "cache_control" not in json.dumps(
        AnthropicModel("m", base_url="http://x")._body(request)
    )
    assert "prompt_cache_key" not in OpenAIResponsesModel("m", base_url="http://x")._body(request)
    on = AnthropicModel("m", base_url="http://x", prompt_cache=True)  # given wins over the env
    assert "cache_control" in json.dumps(on._body(request))


@pytest.mark.parametrize("model_type", [OpenAIModel, OpenAIResponsesModel])
def test_openai_sends_one_cache_key_per_session(model_type: type[OpenAIModel]) -> None:
    model = model_type("m", base_url="http://x")

    def key(session_id: str | None) -> Any:
        request = ModelRequest(instructions="", messages=_conversation(), session_id=session_id)
        return model._body(request).get("prompt_cache_key")

    assert key("user@example.com") == key("user@example.com")
    assert key("user@example.com") != key("other")
    assert "example" not in key("user@example.com"), "the session id is hashed, not sent"
    assert key(None) is None  # a request of no session (a compaction's summary) has none


def test_a_part_decoded_from_the_journal_sends_the_bytes_the_fresh_one_sent() -> None:
    # Streamed blocks keep the provider's key order; the journal writes keys sorted. The
    # request is built from either after a crash: both must be the same bytes.
    fresh = _conversation()
    call = fresh[1].tool_calls[0]
    parts = (
        {"type": "thinking", "thinking": "Hm.", "signature": "c2ln", "extra": {"b": 1, "a": 2}},
    )
    fresh[1] = replace(fresh[1], tool_calls=(replace(call, parts=parts),))
    record = ModelCallRecord(
        turn_id="t",
        round=0,
        status="completed",
        text="",
        tool_calls=fresh[1].tool_calls,
        created_at=0,
    )
    decoded = decode(ModelCallRecord, encode(record))
    assert list(decoded.tool_calls[0].parts[0]) != list(parts[0]), "the journal sorts keys"
    again = [fresh[0], replace(fresh[1], tool_calls=decoded.tool_calls), fresh[2]]
    for model in (
        AnthropicModel("m", base_url="http://x"),
        OpenAIModel("m", base_url="http://x"),
        OpenAIResponsesModel("m", base_url="http://x"),
    ):
        for kept in ("anthropic", "openai-chat", "openai-responses"):
            one, two = (
                [
                    replace(m, tool_calls=tuple(replace(c, wire=kept) for c in m.tool_calls))
                    for m in ms
                ]
                for ms in (fresh, again)
            )
            first = json.dumps(model._body(ModelRequest(instructions="", messages=one)))
            second = json.dumps(model._body(ModelRequest(instructions="", messages=two)))
            assert first == second, (type(model).__name__, kept)


# -- a turn end to end: the prefix repeats, the cache is read, the trace says so -------------


class Lookup(pydantic.BaseModel):
    query: str = pydantic.Field(description="what to find")


@fx.tool(name="lookup", replay="safe")
def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
    """Find something, step by step."""
    return f"{inp.query}: found"


def two_lookups_then_answer(request: ModelRequest) -> ModelResponse:
    results = 0
    for message in reversed(request.messages):
        if message.role == "user":
            break
        results += message.role == "tool"
    if results >= 2:
        return ModelResponse(text="Done looking.")
    call = ToolCallRequest(name="lookup", arguments=json.dumps({"query": f"step {results}"}))
    return ModelResponse(text=f"Looking ({results}).", tool_calls=(call,))


def model_for(wire: str, server: ScriptedModelServer, cache: bool) -> Any:
    if wire == "anthropic":
        return AnthropicModel("claude-x", base_url=server.url, prompt_cache=cache)
    model_type = OpenAIModel if wire == "openai" else OpenAIResponsesModel
    return model_type("gpt-x", base_url=server.openai_base_url, prompt_cache=cache)


def run_two_turns(
    tmp_path: Path, wire: str, *, cache: bool = True, reasoning: bool = True
) -> tuple[ScriptedModelServer, list[Any], str]:
    quirks = Quirks(prompt_cache=True, reasoning=reasoning, chunk_bytes=7, split_arguments=3)
    with ScriptedModelServer(two_lookups_then_answer, quirks=quirks) as server:
        agent = fx.Agent("a", model_for(wire, server, cache), "Be careful.", tools=[lookup])
        store = fresh_store(tmp_path)

        async def go() -> tuple[list[Any], str]:
            async with runtime(tmp_path, [agent], store=store) as rt:
                s = rt.session("cache-1")
                assert await s.run("Find it.", timeout=8) == "Done looking."
                assert await s.run("And again.", timeout=8) == "Done looking."
                out = io.StringIO()
                print_trace(store, "cache-1", out)
                return await s.events(), out.getvalue()

        events, trace = run(go(), timeout=20)
    assert [r.status for r in server.requests] == [200] * 6, [r.error for r in server.requests]
    return server, events, trace


def test_every_step_repeats_the_prefix_the_step_before_sent(tmp_path: Path, wire: str) -> None:
    server, _, _ = run_two_turns(tmp_path, wire)
    raws = [r.raw for r in server.requests]
    for before, after in itertools.pairwise(raws):
        prefix = prefix_before_latest(before)
        assert len(conversation_offsets(before)) >= 1
        assert after.startswith(prefix), "a step changed bytes the step before had sent"
    # The prefix is everything but the newest message: in the last request, all three steps
    # of the first turn and the opening of the second.
    assert len(prefix_before_latest(raws[-1])) > len(raws[2]) // 2


def test_cache_hits_are_recorded_priced_and_traced(tmp_path: Path, wire: str) -> None:
    _, events, trace = run_two_turns(tmp_path, wire)
    completed = [e.data for e in of_type(events, "model.completed")]
    reads = [d["cache_read_tokens"] for d in completed]
    assert reads[0] == 0 and all(r > 0 for r in reads[1:]), reads
    assert all(r < d["input_tokens"] for r, d in zip(reads, completed, strict=True))
    writes = [d["cache_creation_tokens"] for d in completed]
    if wire == "anthropic":
        assert all(w > 0 for w in writes), writes  # every step writes its newest message
    else:
        assert writes == [0] * 6  # OpenAI caches on its own and reports no writes
    # The reasoning count the server reports (Anthropic has none: thinking is output).
    reasoning = {"openai": 5, "openai-responses": 7, "anthropic": 0}[wire]
    assert [d["reasoning_tokens"] for d in completed] == [reasoning] * 6
    if reasoning:
        assert f"({reasoning * 6} reasoning)" in trace
    total_read = sum(reads)
    assert f"({reads[1]} cached" in trace, trace
    inputs = sum(d["input_tokens"] for d in completed)
    assert f"session total: 6 model call(s), {inputs} input ({total_read} cached" in trace


def test_with_caching_off_anthropic_reads_nothing_from_the_cache(tmp_path: Path) -> None:
    server, events, trace = run_two_turns(tmp_path, "anthropic", cache=False)
    assert all(b"cache_control" not in r.raw for r in server.requests)
    completed = [e.data for e in of_type(events, "model.completed")]
    assert [d["cache_read_tokens"] for d in completed] == [0] * 6
    assert "cached" not in trace
