"""The scripted model stays cheap over a long session: bounded request log, incremental
token counts that equal a full count, and a policy view that starts at the last user message."""

from __future__ import annotations

import asyncio

from fxdurable.runtime.models.base import INTERRUPTED_NOTE, ChatMessage, Finish, ModelRequest
from fxdurable.runtime.models.scripted import ScriptedModel, reply, turn_messages


def _input_tokens(model: ScriptedModel, messages: list[ChatMessage]) -> int:
    async def go() -> int:
        async for part in model.stream(ModelRequest(instructions="", messages=messages)):
            if isinstance(part, Finish):
                return part.response.usage.input_tokens
        raise AssertionError("no finish")

    return asyncio.run(go())


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", text=text)


def test_requests_keep_only_the_most_recent() -> None:
    model = ScriptedModel(lambda request: reply("ok"), keep_requests=3)
    for n in range(5):
        _input_tokens(model, [_user(f"m{n}")])
    assert [r.messages[0].text for r in model.requests] == ["m2", "m3", "m4"]
    assert model.requests[0].messages[0].text == "m2"


def test_input_tokens_equal_a_full_count_whether_the_request_grows_or_changes() -> None:
    model = ScriptedModel(lambda request: reply("ok"))
    convo = [_user("one two")]
    assert _input_tokens(model, convo) == 2
    convo = [*convo, ChatMessage(role="assistant", text="three"), _user("four five six")]
    assert _input_tokens(model, convo) == 6  # extends the previous request
    changed = [_user("one"), *convo[1:]]  # an earlier message differs: counted afresh
    assert _input_tokens(model, changed) == 5
    assert _input_tokens(model, [_user("x")]) == 1  # shorter: counted afresh


def test_turn_messages_start_at_the_last_user_message_past_interruption_notes() -> None:
    cut = ChatMessage(role="assistant", text="half", interrupted=True)
    answer = ChatMessage(role="assistant", text="done")
    messages = [_user("old"), answer, _user("now"), cut, _user(INTERRUPTED_NOTE), answer]
    request = ModelRequest(instructions="", messages=messages)
    assert turn_messages(request) == [_user("now"), answer]
