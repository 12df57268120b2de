"""Typed final answers (``Agent(output_type=...)``, docs/typed-output.md), on the embedded
runtime with the scripted model: validated, rejected with a reason the model reads, failed
past ``output_retries``, and read back as the type."""

from __future__ import annotations

import pydantic
import pytest
from fxrt_support import FAST, event_types, events, fresh_store, read, run

import fxdurable as fx
from fxdurable.core.records import MessageRecord
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import REJECTED_ANSWER_HEADING, ModelRequest, ModelResponse
from fxdurable.runtime.output import OutputSpec, strict_compatible
from fxdurable.runtime.render import Style, describe

PLAIN = Style.plain()


class Rating(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    score: int
    reason: str


class Loose(pydantic.BaseModel):
    title: str
    tags: list[str] = []


def answers(*texts: str) -> fx.ScriptedModel:
    """A model answering the turn's n-th request with ``texts[n]`` (the last one after)."""

    def policy(request: ModelRequest) -> ModelResponse:
        rejected = sum(m.text.startswith(REJECTED_ANSWER_HEADING) for m in request.messages)
        return fx.reply(texts[min(rejected, len(texts) - 1)])

    return fx.ScriptedModel(policy)


def turn(tmp_path, agent: fx.Agent, prompt: str = "rate it"):
    async def go():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s")
            sub = await s.wait((await s.submit(prompt)).id, timeout=10)
            messages: list[MessageRecord] = read(rt, lambda v: list(v.messages("s")))
            trace = [describe(e, PLAIN) or "" for e in events(rt, "s")]
            return sub, event_types(rt, "s"), messages, trace

    return run(go())


def test_a_valid_answer_is_the_submissions_output_as_the_type(tmp_path) -> None:
    model = answers('{"score": 8, "reason": "it shipped"}')
    sub, kinds, _, _ = turn(tmp_path, fx.Agent("a", model, output_type=Rating))
    assert sub.status == "completed", sub.error
    assert sub.output == Rating(score=8, reason="it shipped")
    assert sub.output_json == '{"score":8,"reason":"it shipped"}'
    assert "output.rejected" not in kinds
    (request,) = model.requests
    assert request.output is not None and request.output.schema == Rating.model_json_schema()
    assert request.output.strict, "a closed, all-required model is enforced by the provider"


def test_an_invalid_answer_is_rejected_with_the_reason_and_the_model_asked_again(
    tmp_path,
) -> None:
    model = answers('{"score": "high", "reason": "x"}', '```json\n{"score": 3, "reason": "x"}\n```')
    sub, kinds, messages, trace = turn(tmp_path, fx.Agent("a", model, output_type=Rating))
    assert sub.status == "completed", sub.error
    assert sub.output == Rating(score=3, reason="x"), "a fenced JSON answer is read too"
    assert kinds.count("output.rejected") == 1 and kinds.count("model.completed") == 2
    notes = [m for m in messages if m.role == "user" and m.text.startswith(REJECTED_ANSWER_HEADING)]
    (note,) = notes
    assert "score: Input should be a valid integer" in note.text
    # The trace says so.
    (shown,) = [line for line in trace if "rejected" in line]
    assert shown.startswith("answer rejected (1): [Your final answer was rejected: it does not")
    # The model read the note right after its invalid answer.
    second = model.requests[1].messages
    assert [m.role for m in second[-2:]] == ["assistant", "user"]
    assert second[-1].text == note.text


def test_past_output_retries_the_turn_fails_with_output_invalid_and_the_session_goes_on(
    tmp_path,
) -> None:
    model = answers("not json at all")
    agent = fx.Agent("a", model, output_type=Rating, output_retries=1)

    async def go():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s")
            with pytest.raises(fx.SubmissionFailedError) as caught:
                await s.run("rate it", timeout=10)
            model_calls = len(model.requests)
            # The session is at rest and takes the next message (which fails the same way).
            nxt = await s.wait((await s.submit("again")).id, timeout=10)
            return caught.value, model_calls, nxt, event_types(rt, "s")

    error, model_calls, nxt, kinds = run(go())
    assert error.error["code"] == "output_invalid"
    assert "not a valid Rating after 1 retries" in error.error["message"]
    assert "it is not JSON" in error.error["message"]
    assert model_calls == 2, "the first answer and one retry"
    assert kinds.count("output.rejected") == 1 + 1
    assert nxt.status == "failed" and nxt.output is None


def test_a_type_that_is_not_an_object_is_asked_for_wrapped(tmp_path) -> None:
    model = answers('{"value": ["a", "b"]}')
    sub, _, _, _ = turn(tmp_path, fx.Agent("a", model, output_type=list[str]))
    assert sub.output == ["a", "b"]
    schema = model.requests[0].output.schema  # type: ignore[union-attr]
    assert schema["required"] == ["value"] and schema["properties"]["value"]["type"] == "array"


def test_an_untyped_agent_has_no_output_and_sends_no_schema(tmp_path) -> None:
    model = answers('{"score": 1}')
    sub, _, _, _ = turn(tmp_path, fx.Agent("a", model))
    assert sub.result == '{"score": 1}' and sub.output is None and sub.output_json is None
    assert model.requests[0].output is None


def test_strict_mode_only_for_closed_all_required_schemas() -> None:
    assert OutputSpec(Rating).format.strict
    assert not OutputSpec(Loose).format.strict, "a default makes a property optional"
    assert not strict_compatible({"type": "object", "properties": {"a": {"type": "string"}}})


def test_an_output_type_pydantic_cannot_validate_is_refused_when_the_agent_is_built() -> None:
    with pytest.raises(ConfigurationError, match="cannot be validated"):
        fx.Agent("a", answers("x"), output_type=object())
    with pytest.raises(ConfigurationError, match="output_retries"):
        fx.Agent("a", answers("x"), output_type=Rating, output_retries=-1)
