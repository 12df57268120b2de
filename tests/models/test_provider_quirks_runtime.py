"""What a user sees of the provider quirks (issue 9 §1): a real Runtime, an agent whose model
talks HTTP to a local server answering with byte streams written here, the journal, and
``fxdurable trace``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pydantic
import pytest
import raw_stream_support as raw
from provider_e2e_support import Sleeps, fresh_store, of_type, run, runtime
from raw_stream_support import HOLD_S, RawStreams
from test_provider_stream_quirks import ANTHROPIC_TEXT_BLOCK, OPENAI_TPM_TOO_LARGE

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.records import ModelCallRecord
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.testing.model_server_http import JsonReply, Reply

# Pretty-printed, with a key order and spacing no serializer of ours would produce.
ARGUMENTS = '{\n    "path" :"notes.txt",\n  "text": "hello"\n}'


class Write(pydantic.BaseModel):
    path: str
    text: str


def writer(log: list[Write]) -> fx.Tool:
    @fx.tool(name="write_file", replay="unsafe")
    def write_file(args: Write, ctx: fx.ToolContext) -> str:
        """Write a file."""
        log.append(args)
        return "written"

    return write_file


def openai_agent(server: RawStreams, log: list[Write], **kw: object) -> fx.Agent:
    model = OpenAIModel("m", base_url=f"{server.url}/v1", finish_grace_s=HOLD_S)
    return fx.Agent("a", model, tools=[writer(log)], **kw)  # type: ignore[arg-type]


def held(body: str) -> Reply:
    """One-byte chunks, and the response held open after the last byte."""
    return raw.stream(body, chunk_bytes=1, hold_s=HOLD_S)


def text_answer(text: str, finish: str | None = "stop") -> str:
    return (
        raw.openai_chunk({"content": text}) + raw.openai_chunk(finish=finish) + raw.openai_usage()
    )


@dataclass(frozen=True)
class Turn:
    """One submission run to rest: its answer or its failure, the journal, the trace."""

    answer: str | None
    failed: fx.SubmissionFailedError | None
    calls: list[ModelCallRecord]
    events: list[fx.EventRecord]
    trace: str


def one_turn(tmp_path: Path, agent: fx.Agent, sleeps: Sleeps | None = None) -> Turn:
    store = fresh_store(tmp_path)
    out = io.StringIO()

    async def go() -> Turn:
        async with runtime(tmp_path, [agent], sleeps, store=store) as rt:
            s = rt.session("s")
            answer, failed = None, None
            try:
                answer = await s.run("go", timeout=8)
            except fx.SubmissionFailedError as exc:
                failed = exc
            assert print_trace(store, "s", out=out) == 0
            calls = rt.journal.read(
                lambda v: [c for sub in v.submissions("s") for c in v.model_calls(sub.id)]
            )
            return Turn(answer, failed, calls, await s.events(), out.getvalue())

    return run(go(), timeout=15)


def test_a_provider_that_never_sends_finish_reason_runs_its_tool_calls(tmp_path: Path) -> None:
    """Tool-call deltas, usage, [DONE] and no finish_reason anywhere: today's retries until
    the budget is gone become one completed turn with its call executed."""
    no_finish_call = (
        raw.openai_tool_fragment("", id_="call_1", name="write_file")
        + raw.openai_tool_fragment(ARGUMENTS[:9])
        + raw.openai_tool_fragment(ARGUMENTS[9:])
        + raw.openai_usage()
        + "data: [DONE]\n\n"
    )
    no_finish_text = (
        raw.openai_chunk({"content": "Saved."}) + raw.openai_usage() + "data: [DONE]\n\n"
    )
    log: list[Write] = []
    with RawStreams(held(no_finish_call), held(no_finish_text)) as server:
        turn = one_turn(tmp_path, openai_agent(server, log))

    assert turn.answer == "Saved."
    assert log == [Write(path="notes.txt", text="hello")]
    assert [(c.stop_reason, c.stop_inferred, c.truncated) for c in turn.calls] == [
        ("tool_calls", True, False),
        ("stop", True, False),
    ]
    completed = of_type(turn.events, "model.completed")
    assert [e.data["stop_reason"] for e in completed] == ["tool_calls", "stop"]
    assert all(e.data["stop_inferred"] is True for e in completed)
    assert not of_type(turn.events, "model.error")
    assert "[stop: tool_calls, inferred]" in turn.trace


def test_the_follow_up_request_carries_the_argument_text_byte_for_byte(tmp_path: Path) -> None:
    call = (
        raw.openai_tool_fragment("", id_="call_1", name="write_file")
        + "".join(raw.openai_tool_fragment(ch) for ch in ARGUMENTS)
        + raw.openai_chunk(finish="tool_calls")
        + raw.openai_usage()
        + "data: [DONE]\n\n"
    )
    log: list[Write] = []
    with RawStreams(held(call), held(text_answer("Saved."))) as server:
        turn = one_turn(tmp_path, openai_agent(server, log))
        bodies = server.bodies

    assert turn.answer == "Saved."
    assert turn.calls[0].tool_calls[0].arguments == ARGUMENTS, "the journal holds the model's text"
    (assistant,) = [m for m in bodies[1]["messages"] if m["role"] == "assistant"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == ARGUMENTS
    assert log == [Write(path="notes.txt", text="hello")]


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_tool_call_cut_by_the_output_limit_never_runs_and_the_turn_fails_readably(
    wire: str, tmp_path: Path
) -> None:
    if wire == "openai":
        cut = (
            raw.openai_tool_fragment(
                '{"path": "notes.txt", "text": "hel', id_="c1", name="write_file"
            )
            + raw.openai_chunk(finish="length")
            + raw.openai_usage(completion=256)
            + "data: [DONE]\n\n"
        )
    else:
        cut = (
            raw.anthropic_start()
            + raw.anthropic_tool_use(0, "toolu_1", "write_file", '{"path": "notes.txt", ', '"text')
            + raw.anthropic_stop("max_tokens", output_tokens=256)
        )
    log: list[Write] = []
    sleeps = Sleeps()
    with RawStreams(held(cut)) as server:
        if wire == "openai":
            agent = openai_agent(server, log)
        else:
            model = AnthropicModel("claude-x", base_url=server.url, finish_grace_s=HOLD_S)
            agent = fx.Agent("a", model, tools=[writer(log)])
        turn = one_turn(tmp_path, agent, sleeps)
        requests = len(server.bodies)

    assert log == [], "a truncated call never runs"
    assert requests == 1, "and is never sent back as a call the model made"
    # Recorded without its calls, for the tokens it spent: the usage totals count them.
    (recorded,) = turn.calls
    assert recorded.tool_calls == () and recorded.truncated
    assert recorded.usage.output_tokens == 256
    (completed,) = of_type(turn.events, "model.completed")
    assert completed.data["tools"] == [] and completed.data["output_tokens"] == 256
    assert "256 output tokens" in turn.trace
    assert turn.failed is not None and turn.failed.error is not None
    assert turn.failed.error["code"] == "model_truncated"
    message = turn.failed.error["message"]
    stop = "length" if wire == "openai" else "max_tokens"
    assert f"cut off by its output limit (stop reason '{stop}', 256 output tokens)" in message
    assert "write_file" in message and "none of its 1 tool call(s) was run" in message
    assert sleeps.delays == [], "not retried: the same request would be cut the same way"
    assert "model_truncated" in turn.trace


def test_a_text_answer_cut_by_length_is_recorded_as_truncated_and_shown(tmp_path: Path) -> None:
    with RawStreams(held(text_answer("The answer is", finish="length"))) as server:
        turn = one_turn(tmp_path, openai_agent(server, []))

    assert turn.answer == "The answer is"
    assert [(c.stop_reason, c.truncated) for c in turn.calls] == [("length", True)]
    (completed,) = of_type(turn.events, "model.completed")
    assert (completed.data["stop_reason"], completed.data["truncated"]) == ("length", True)
    assert "[truncated: length]" in turn.trace


def test_an_error_after_the_finish_is_a_failed_call_retried_not_an_empty_success(
    tmp_path: Path,
) -> None:
    errored = (
        raw.openai_chunk(finish="stop")
        + 'data: {"error": {"message": "The server had an error while processing your '
        'request. Sorry about that!", "type": "server_error"}}\n\n'
    )
    sleeps = Sleeps()
    with RawStreams(held(errored), held(text_answer("Fine."))) as server:
        turn = one_turn(tmp_path, openai_agent(server, []), sleeps)

    assert turn.answer == "Fine."
    (error,) = of_type(turn.events, "model.error")
    assert "server had an error" in str(error.data["message"])
    assert len(sleeps.delays) == 1


def test_a_request_over_the_tokens_per_minute_limit_fails_at_once(tmp_path: Path) -> None:
    sleeps = Sleeps()
    with RawStreams(JsonReply(429, OPENAI_TPM_TOO_LARGE)) as server:
        turn = one_turn(tmp_path, openai_agent(server, []), sleeps)
        requests = len(server.bodies)

    assert requests == 1 and sleeps.delays == [], "no backoff: waiting cannot make it fit"
    assert turn.failed is not None and turn.failed.error is not None
    assert turn.failed.error["code"] == "context_length"
    message = turn.failed.error["message"]
    assert message.startswith("the current turn alone is too large for the model"), message
    assert "tokens-per-minute limit" in message
    assert "Limit 30000, Requested 342389" in turn.failed.error["message"]


def test_an_anthropic_error_event_after_message_delta_is_retried(tmp_path: Path) -> None:
    overloaded = raw.anthropic_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    stop_reason = raw.anthropic_event(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
    )
    first = raw.anthropic_start() + ANTHROPIC_TEXT_BLOCK + stop_reason + overloaded
    second = raw.anthropic_start() + ANTHROPIC_TEXT_BLOCK + raw.anthropic_stop("end_turn")
    sleeps = Sleeps()
    with RawStreams(held(first), held(second)) as server:
        model = AnthropicModel("claude-x", base_url=server.url, finish_grace_s=HOLD_S)
        turn = one_turn(tmp_path, fx.Agent("a", model), sleeps)

    assert turn.answer == "Hi"
    (error,) = of_type(turn.events, "model.error")
    assert "overloaded_error" in str(error.data["message"])
    (completed,) = of_type(turn.events, "model.completed")
    assert completed.data["stop_reason"] == "end_turn"
