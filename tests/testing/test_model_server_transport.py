"""What the scripted model server does to the connection: chunking, streams held open,
failures before success, context-length and auth errors, redaction, prompt shutdown."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from model_server_support import anthropic_body, client, openai_body, post, split_events

from fxdurable.runtime.models.base import ModelRequest
from fxdurable.runtime.models.scripted import ScriptedModel, call, reply
from fxdurable.testing import Failure, Quirks, ScriptedModelServer

HELLO = [{"role": "user", "content": "say hello to the world"}]
USAGE = {"stream_options": {"include_usage": True}}


def openai_url(server: ScriptedModelServer) -> str:
    return f"{server.openai_base_url}/chat/completions"


def anthropic_url(server: ScriptedModelServer) -> str:
    return f"{server.anthropic_base_url}/v1/messages"


def test_one_byte_chunks_arrive_as_many_one_byte_reads_of_the_same_stream():
    script = [reply("a few words", call("deploy", version="1.4"))]
    with ScriptedModelServer(script) as server:
        whole = post(anthropic_url(server), anthropic_body(HELLO))
        server.quirks = Quirks(chunk_bytes=1)
        with (
            client() as http,
            http.stream("POST", anthropic_url(server), json=anthropic_body(HELLO)) as response,
        ):
            reads = list(response.iter_raw())
    assert len(reads) == len(b"".join(reads)) > 500
    assert {len(r) for r in reads} == {1}
    strip_ids = [
        (e.event, {k: v for k, v in e.json.items() if k not in ("message", "content_block")})
        for e in split_events(b"".join(reads).decode())
    ]
    assert strip_ids == [
        (e.event, {k: v for k, v in e.json.items() if k not in ("message", "content_block")})
        for e in whole.events
    ]


def test_events_reach_the_client_as_they_are_written():
    quirks = Quirks(event_delay_s=0.05, text_chunk_chars=2)
    with ScriptedModelServer([reply("one two three four")], quirks=quirks) as server:
        started = time.monotonic()
        arrivals = []
        with (
            client() as http,
            http.stream("POST", openai_url(server), json=openai_body(HELLO)) as response,
        ):
            for line in response.iter_lines():
                if line:
                    arrivals.append(time.monotonic() - started)
    assert len(arrivals) > 10
    assert arrivals[-1] - arrivals[0] > 0.4  # spread out, not delivered in one lump


def test_hold_open_keeps_the_socket_open_after_the_last_event_and_stop_is_prompt():
    quirks = Quirks(hold_open_after_finish_s=30.0)
    server = ScriptedModelServer([reply("done")], quirks=quirks).start()
    try:
        seen = []
        with (
            client(httpx.Timeout(2.0, read=0.3)) as http,
            http.stream("POST", openai_url(server), json=openai_body(HELLO)) as response,
        ):
            lines = response.iter_lines()
            with pytest.raises(httpx.ReadTimeout):
                for line in lines:
                    seen.append(line)
        assert seen[-2:] == ["data: [DONE]", ""]  # everything arrived, then no end
    finally:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 0.5


def test_stop_cuts_a_stream_held_open_with_a_client_still_reading():
    server = ScriptedModelServer([reply("done")], quirks=Quirks(hold_open_after_finish_s=30))
    server.start()
    with (
        client() as http,
        http.stream("POST", anthropic_url(server), json=anthropic_body(HELLO)) as response,
    ):
        lines = response.iter_lines()
        while next(lines) != 'data: {"type":"message_stop"}':
            pass
        started = time.monotonic()
        server.stop()
        with pytest.raises(httpx.RemoteProtocolError):
            list(lines)  # the body never ended: the cut is an incomplete response
        assert time.monotonic() - started < 0.5


def test_a_short_hold_open_then_ends_the_stream():
    quirks = Quirks(hold_open_after_finish_s=0.3, omit_done=True)
    with ScriptedModelServer([reply("done")], quirks=quirks) as server:
        started = time.monotonic()
        answer = post(openai_url(server), openai_body(HELLO))
    assert time.monotonic() - started >= 0.3
    assert answer.events[-1].json["choices"][0]["finish_reason"] == "stop"


def test_fail_first_answers_each_failure_in_turn_then_succeeds():
    failures = [
        Failure("rate_limited", retry_after="2"),
        Failure("server_error"),
        Failure("unavailable", retry_after="1"),
        Failure("overloaded"),
    ]
    with ScriptedModelServer([reply("finally")], quirks=Quirks(fail_first=failures)) as server:
        answers = [post(anthropic_url(server), anthropic_body(HELLO)) for _ in range(5)]
        again = post(openai_url(server), openai_body(HELLO))
    assert [a.status for a in answers] == [429, 500, 503, 529, 200]
    assert again.status == 200
    assert answers[0].headers["retry-after"] == "2"
    assert "retry-after" not in answers[1].headers
    assert answers[2].headers["retry-after"] == "1"
    assert [a.json["error"]["type"] for a in answers[:4]] == [
        "rate_limit_error",
        "api_error",
        "api_error",
        "overloaded_error",
    ]
    assert answers[3].json == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert [r.status for r in server.requests] == [429, 500, 503, 529, 200, 200]
    assert [r.failure for r in server.requests[:4]] == failures
    assert server.requests[0].request is not None  # failed requests are still read back


def test_openai_failures_have_openai_bodies_and_setting_quirks_rearms_them():
    with ScriptedModelServer([reply("ok")]) as server:
        assert post(openai_url(server), openai_body(HELLO)).status == 200
        server.quirks = Quirks(fail_first=[Failure("rate_limited", retry_after="7")])
        limited = post(openai_url(server), openai_body(HELLO))
        assert post(openai_url(server), openai_body(HELLO)).status == 200
    assert limited.status == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.json["error"]["code"] == "rate_limit_exceeded"


def test_an_error_event_after_a_200_mid_stream():
    script = [reply("a long answer that is cut short", call("deploy", version="1.4"))]
    quirks = Quirks(fail_first=[Failure("stream_error"), Failure("stream_error")])
    with ScriptedModelServer(script, quirks=quirks) as server:
        anthropic = post(anthropic_url(server), anthropic_body(HELLO))
        openai = post(openai_url(server), openai_body(HELLO, **USAGE))
    assert anthropic.status == 200
    events = anthropic.events
    assert events[0].event == "message_start"
    assert events[-1].event == "error"
    assert events[-1].json == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert not {"message_delta", "message_stop"} & {e.event for e in events}
    assert openai.status == 200
    chunks = openai.events
    assert "error" in chunks[-1].json
    assert all(e.data != "[DONE]" for e in chunks)
    assert all(c.json["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_a_disconnect_mid_stream_is_an_incomplete_body():
    quirks = Quirks(fail_first=[Failure("disconnect")])
    with ScriptedModelServer([reply("cut short here")], quirks=quirks) as server:
        with (
            client() as http,
            http.stream("POST", openai_url(server), json=openai_body(HELLO)) as response,
        ):
            got = []
            with pytest.raises(httpx.RemoteProtocolError):
                for line in response.iter_lines():
                    got.append(line)
        assert got[0].startswith("data: {")
        assert post(openai_url(server), openai_body(HELLO)).status == 200


def test_a_stall_times_the_client_out_and_stop_is_still_prompt():
    server = ScriptedModelServer([reply("late")], quirks=Quirks(fail_first=[Failure("stall")]))
    server.start()
    try:
        with (
            client(httpx.Timeout(2.0, read=0.2)) as http,
            pytest.raises(httpx.ReadTimeout),
        ):
            http.post(openai_url(server), json=openai_body(HELLO))
    finally:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 0.5
    assert server.requests[0].status == 0


def test_context_limit_answers_each_providers_context_length_400():
    long = [{"role": "user", "content": "word " * 50}]
    short = [{"role": "user", "content": "a summary"}]
    with ScriptedModelServer([reply("ok")], quirks=Quirks(context_limit_chars=100)) as server:
        openai = post(openai_url(server), openai_body(long))
        anthropic = post(anthropic_url(server), anthropic_body(long, system="be brief"))
        assert post(openai_url(server), openai_body(short)).status == 200
    assert openai.status == 400
    error = openai.json["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("This model's maximum context length is 100 tokens.")
    assert anthropic.status == 400
    assert anthropic.json["type"] == "error"
    assert anthropic.json["error"]["type"] == "invalid_request_error"
    assert anthropic.json["error"]["message"] == "prompt is too long: 258 tokens > 100 maximum"


def test_api_keys_are_required_when_asked_and_never_recorded():
    key = "sk-test-SECRET-4242"
    with ScriptedModelServer([reply("ok")], quirks=Quirks(require_api_key=key)) as server:
        denied = [
            post(openai_url(server), openai_body(HELLO)),
            post(openai_url(server), openai_body(HELLO), {"Authorization": "Bearer wrong"}),
            post(anthropic_url(server), anthropic_body(HELLO), {"Authorization": f"Bearer {key}"}),
        ]
        allowed = [
            post(openai_url(server), openai_body(HELLO), {"Authorization": f"Bearer {key}"}),
            post(anthropic_url(server), anthropic_body(HELLO), {"x-api-key": key}),
        ]
    assert [a.status for a in denied] == [401, 401, 401]
    assert denied[0].json["error"]["code"] == "invalid_api_key"
    assert denied[2].json["error"]["type"] == "authentication_error"
    assert [a.status for a in allowed] == [200, 200]
    assert server.requests[3].headers["authorization"] == "[REDACTED]"
    assert server.requests[4].headers["x-api-key"] == "[REDACTED]"
    assert key not in repr(server.requests)


def test_a_list_script_answers_by_position_in_the_turn_like_scripted_model():
    script = [reply("", call("run_tests")), reply("all green")]
    turn = [
        {"role": "user", "content": "test it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    with ScriptedModelServer(script) as server:
        first = post(openai_url(server), openai_body(turn[:1])).events
        second = post(openai_url(server), openai_body(turn)).events
    assert first[-2].json["choices"][0]["finish_reason"] == "tool_calls"
    assert second[1].json["choices"][0]["delta"]["content"] == "all green"


def test_usage_is_what_scripted_model_reports_in_process():
    policy = [reply("three words here", call("deploy", version="1.4"))]

    async def in_process(request: ModelRequest):
        parts = [p async for p in ScriptedModel(policy).stream(request)]
        return parts[-1].response.usage

    with ScriptedModelServer(policy) as server:
        answer = post(openai_url(server), openai_body(HELLO, **USAGE))
    expected = asyncio.run(in_process(server.model_requests[0]))
    usage = answer.events[-2].json["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        expected.input_tokens,
        expected.output_tokens,
    )


def test_a_policy_that_raises_is_a_500_naming_the_error():
    def broken(request: ModelRequest):
        raise LookupError("no rule for this")

    with ScriptedModelServer(broken) as server:
        answer = post(anthropic_url(server), anthropic_body(HELLO))
    assert answer.status == 500
    assert "LookupError: no rule for this" in answer.json["error"]["message"]


def test_unknown_paths_are_404_and_a_stopped_server_starts_again():
    server = ScriptedModelServer([reply("ok")])
    with pytest.raises(RuntimeError):
        _ = server.url
    with server:
        assert post(f"{server.url}/v1/completions", {"prompt": "x"}).status == 404
        with client() as http:
            assert http.get(f"{server.url}/").status_code == 404
    server.stop()  # idempotent
    with server:
        assert post(openai_url(server), openai_body(HELLO)).status == 200
    assert [r.wire for r in server.requests] == [None, "openai"]
