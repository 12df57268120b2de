"""A paused model call (Anthropic ``pause_turn``) is a recorded round of its own: the next
round continues it, the answer starts with the paused text, and a turn that keeps pausing
stops at ``Durability(max_pauses=...)`` (the scripted model passes a policy's stop reason
through, so this runs offline; the wire side is in tests/models and tests/crash)."""

from __future__ import annotations

from fxrt_support import FAST, fresh_store, read, run

import fxdurable as fx
from fxdurable.runtime.models.base import ModelRequest, ModelResponse


def pausing(times: int) -> fx.ScriptedModel:
    """Pauses ``times`` times in a row, then answers."""

    def policy(request: ModelRequest) -> ModelResponse:
        paused = sum(1 for m in request.messages if m.role == "assistant")
        if paused < times:
            return ModelResponse(text=f"piece {paused}.", stop_reason="pause_turn")
        return ModelResponse(text=" Done.")

    return fx.ScriptedModel(policy)


def turn(tmp_path, agent: fx.Agent):
    async def go():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s")
            sub = await s.wait((await s.submit("search")).id, timeout=10)
            calls = read(rt, lambda v: [(c.round, c.stop_reason) for c in v.model_calls(sub.id)])
            return sub, calls

    return run(go())


def test_each_pause_is_a_round_and_the_answer_starts_with_the_paused_text(tmp_path) -> None:
    model = pausing(2)
    sub, calls = turn(tmp_path, fx.Agent("a", model))
    assert sub.status == "completed", sub.error
    assert sub.result == "piece 0.piece 1. Done."
    assert calls == [(0, "pause_turn"), (1, "pause_turn"), (2, None)]
    # Each continuation was sent the paused responses as the turn so far.
    assert [m.text for m in model.requests[2].messages if m.role == "assistant"] == [
        "piece 0.",
        "piece 1.",
    ]


def test_a_turn_that_keeps_pausing_fails_past_max_pauses(tmp_path) -> None:
    model = pausing(100)
    agent = fx.Agent("a", model, durability=fx.Durability(max_pauses=2))
    sub, calls = turn(tmp_path, agent)
    assert sub.status == "failed" and sub.error is not None
    assert sub.error.code == "model_paused"
    assert "3 times in a row" in sub.error.message and "max_pauses=2" in sub.error.message
    assert len(calls) == 3, "two continuations, then it stops"
