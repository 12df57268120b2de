"""The Responses API provider end to end: a real Runtime on embedded SQLite, the model string
``openai-responses/...`` resolved from the environment, the real httpx client, against the
scripted server's Responses wire, which checks each follow-up request as OpenAI does
(``store: false``): a ``function_call_output`` without its ``function_call``, and a
reasoning model's ``function_call`` sent back without its ``reasoning`` item (or with its
``encrypted_content`` altered), are answered 400 with OpenAI's error body.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from models_support import collect
from provider_e2e_support import db_path, of_type, run, runtime
from test_reasoning_end_to_end import QUIRKS, lookup, tool_then_answer

import fxdurable as fx
from fxdurable.errors import ModelError
from fxdurable.runtime.history import build_history
from fxdurable.runtime.models import OpenAIResponsesModel
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse
from fxdurable.runtime.models.openai_responses import build_responses_body
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing.model_server import Failure, Quirks, ScriptedModelServer
from fxdurable.testing.wire_openai_responses import encrypted_for, reasoning_id


def point_at(monkeypatch: pytest.MonkeyPatch, server: ScriptedModelServer) -> str:
    monkeypatch.setenv("FXD_OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-responses")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_1")
    return "openai-responses/gpt-test"


def one_turn(tmp_path: Path, agent: fx.Agent) -> tuple[str, list[fx.EventRecord]]:
    async def go() -> tuple[str, list[fx.EventRecord]]:
        async with runtime(tmp_path, [agent]) as rt:
            s = rt.session("a")
            answer = await s.run("What is it?", timeout=8)
            return answer, await s.events()

    return run(go(), timeout=15)


@pytest.mark.parametrize(
    "quirks",
    [QUIRKS, replace(QUIRKS, chunk_bytes=1, hold_open_after_finish_s=30.0)],
    ids=["chunked", "one-byte-held-open"],
)
def test_a_two_step_tool_turn_carries_the_reasoning_item_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quirks: Quirks
) -> None:
    with ScriptedModelServer(tool_then_answer, quirks=quirks) as server:
        agent = fx.Agent("a", point_at(monkeypatch, server), tools=[lookup])
        answer, events = one_turn(tmp_path, agent)

    assert [r.status for r in server.requests] == [200, 200], [r.error for r in server.requests]
    assert {r.path for r in server.requests} == {"/v1/responses"}
    assert server.requests[0].headers["openai-project"] == "proj_1"
    call_id = server.requests[0].response.tool_calls[0].provider_id
    follow = server.requests[1].body["input"]
    assert [i.get("type") for i in follow] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert follow[1]["id"] == reasoning_id([call_id])
    assert follow[1]["encrypted_content"] == encrypted_for([call_id])
    assert follow[3]["call_id"] == follow[4]["call_id"] == call_id
    assert follow[4]["output"] == "found life"
    assert answer == "The answer is 42."
    texts = [e.data["text"] for e in of_type(events, "model.completed")]
    assert texts == ["Let me look.", "The answer is 42."], "reasoning is never answer text"
    assert "naïve" not in json.dumps([e.data for e in events], ensure_ascii=False)
    # Encrypted reasoning without a summary has nothing to read: counted, never shown.
    first = of_type(events, "model.completed")[0].data
    assert (first.get("thinking"), first.get("thinking_hidden")) == (None, 1)


def follow_up(server: ScriptedModelServer, *, how: str) -> ModelError:
    """A follow-up a careless client would send, through the real client: OpenAI's 400."""
    model = OpenAIResponsesModel("gpt-test", base_url=server.openai_base_url)
    first = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
    _, response = run(collect(model, first))
    (call,) = response.tool_calls
    result_id = call.provider_id
    if how == "missing":
        call = replace(call, wire=None, parts=())
    elif how == "altered":
        reasoning = {**call.parts[0], "encrypted_content": "gAAAA-other"}
        call = replace(call, parts=(reasoning, *call.parts[1:]))
    else:
        result_id = "call_nobody_made"
    follow = ModelRequest(
        instructions="",
        messages=[
            ChatMessage(role="user", text="hi"),
            ChatMessage(role="assistant", text=response.text, tool_calls=(call,)),
            ChatMessage(role="tool", text="found life", tool_call_id=result_id),
        ],
    )
    with pytest.raises(ModelError) as caught:
        run(collect(model, follow))
    return caught.value


@pytest.mark.parametrize("how", ["missing", "altered", "unknown_call_id"])
def test_the_server_refuses_a_follow_up_as_openai_does(how: str) -> None:
    """The negative control: the check that makes the turn above mean something."""
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as server:
        error = follow_up(server, how=how)
        statuses = [r.status for r in server.requests]
        # the same body again, to see the error body itself
        body = httpx.post(
            f"{server.openai_base_url}/responses", json=server.requests[1].body
        ).json()
    assert statuses == [200, 400]
    assert type(error) is ModelError and "HTTP 400" in str(error)
    expected = {
        "missing": "was provided without its required 'reasoning' item",
        "altered": "could not be verified",
        "unknown_call_id": "No tool call found for function call output with call_id",
    }[how]
    assert expected in str(error)
    assert body["error"]["type"] == "invalid_request_error" and expected in body["error"]["message"]


def test_encrypted_content_comes_only_when_included() -> None:
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as server:
        for include in ([], ["reasoning.encrypted_content"]):
            body = {"model": "m", "input": "hi", "stream": True, "include": include}
            with httpx.stream("POST", f"{server.openai_base_url}/responses", json=body) as reply:
                text = reply.read().decode()
            assert ("encrypted_content" in text) == bool(include)


def test_an_error_inside_the_200_stream_is_retried_and_the_turn_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quirks = replace(QUIRKS, fail_first=[Failure("stream_error")])
    with ScriptedModelServer(tool_then_answer, quirks=quirks) as server:
        agent = fx.Agent("a", point_at(monkeypatch, server), tools=[lookup])
        answer, _ = one_turn(tmp_path, agent)
    assert answer == "The answer is 42."
    assert [r.status for r in server.requests] == [200, 200, 200]
    assert server.requests[0].failure == Failure("stream_error")


def test_a_response_cut_at_max_output_tokens_is_recorded_as_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cut(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="The answer is", stop_reason="length")

    with ScriptedModelServer(cut, quirks=QUIRKS) as server:
        answer, events = one_turn(tmp_path, fx.Agent("a", point_at(monkeypatch, server)))
    assert answer == "The answer is"
    (completed,) = of_type(events, "model.completed")
    assert (completed.data["stop_reason"], completed.data["truncated"]) == (
        "max_output_tokens",
        True,
    )


def test_the_journal_alone_rebuilds_the_follow_up_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a recovered turn sends is built from the journal only: read back from a fresh
    connection to the database, the history gives the very ``input`` the follow-up carried,
    and a fresh (stateless) server accepts it, reasoning item included."""
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as server:
        agent = fx.Agent("a", point_at(monkeypatch, server), tools=[lookup])
        one_turn(tmp_path, agent)
    sent = server.requests[1].body

    store = SqliteStore(f"sqlite:///{db_path(tmp_path)}")
    try:
        messages, tasks = store.read(lambda v: (v.messages("a"), v.session_tool_tasks("a")))
    finally:
        store.close()
    before_answer = [m for m in messages if m.seq < messages[-1].seq]
    history = build_history(before_answer, tasks).messages
    request = ModelRequest(instructions=sent.get("instructions", ""), messages=history)
    rebuilt = build_responses_body("gpt-test", request)
    assert rebuilt["input"] == sent["input"]
    assert json.dumps(rebuilt["input"], ensure_ascii=False) == json.dumps(
        sent["input"], ensure_ascii=False
    ), "the same bytes, key order included"
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as fresh:
        status = httpx.post(f"{fresh.openai_base_url}/responses", json={**sent, **rebuilt})
    assert status.status_code == 200, status.text
