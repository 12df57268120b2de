"""What the trace and the console show of a model's reasoning (docs/reasoning.md): the
readable thinking and summaries of each wire's parts, collapsed, cut for the event, never as
answer text; redacted and encrypted pieces counted, not shown."""

from __future__ import annotations

import time

import pytest

from fxdurable.core.events import EventType
from fxdurable.core.records import EventRecord, MessageContent, ToolCallRequest
from fxdurable.runtime.models.thinking import THINKING_SHOWN_MAX, Thinking, thinking_of
from fxdurable.runtime.render import Style, describe


def call(wire: str, *parts: dict[str, object]) -> ToolCallRequest:
    return ToolCallRequest(name="t", arguments="{}", wire=wire, parts=parts)


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        (
            [call("anthropic", {"type": "thinking", "thinking": "A.", "signature": "s"})],
            Thinking("A.", 0),
        ),
        (
            [
                call(
                    "anthropic",
                    {"type": "thinking", "thinking": "A.", "signature": "s"},
                    {"type": "redacted_thinking", "data": "xyz"},
                    {"type": "text", "text": "not thinking"},
                )
            ],
            Thinking("A.", 1),
        ),
        (
            [
                call(
                    "openai-responses",
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "S."}]},
                    {"type": "message", "content": [{"type": "output_text", "text": "no"}]},
                )
            ],
            Thinking("S.", 0),
        ),
        (
            [
                call(
                    "openai-responses",
                    {"type": "reasoning", "summary": [], "encrypted_content": "e"},
                )
            ],
            Thinking("", 1),
        ),
        ([call("openai-chat", {"message": {"reasoning_content": "R."}})], Thinking("R.", 0)),
        (
            [
                call(
                    "openai-chat",
                    {
                        "message": {
                            "reasoning_details": [
                                {"type": "reasoning.text", "text": "D."},
                                {"type": "reasoning.summary", "summary": "Sum."},
                            ]
                        }
                    },
                )
            ],
            Thinking("D.\n\nSum.", 0),
        ),
        (
            [
                call(
                    "openai-chat",
                    {
                        "message": {
                            "reasoning_details": [{"type": "reasoning.encrypted", "data": "e"}]
                        }
                    },
                )
            ],
            Thinking("", 1),
        ),
        # A call's own provider fields (a Gemini thought signature) are not reasoning to read.
        ([call("openai-chat", {"call": {"extra_content": {"google": {}}}})], Thinking("", 0)),
        ([ToolCallRequest(name="t", arguments="{}")], Thinking("", 0)),
    ],
)
def test_each_wire_s_readable_reasoning_and_its_hidden_pieces(
    calls: list[ToolCallRequest], expected: Thinking
) -> None:
    assert thinking_of(calls) == expected


def test_a_response_without_calls_is_read_from_its_own_content() -> None:
    content = MessageContent(
        wire="anthropic",
        parts=({"type": "thinking", "thinking": "Own.", "signature": "s"}, {"type": "text"}),
    )
    assert thinking_of([], [(content.wire, p) for p in content.parts]) == Thinking("Own.", 0)


def test_what_an_event_carries_is_cut_and_says_how_much_is_left() -> None:
    assert Thinking("").shown() is None
    assert Thinking("short").shown() == "short"
    shown = Thinking("x" * (THINKING_SHOWN_MAX + 10)).shown()
    assert shown is not None and shown.startswith("x" * THINKING_SHOWN_MAX)
    assert shown.endswith("… (10 more characters in the journal)")


def test_the_trace_line_gives_the_thinking_s_size_never_its_text() -> None:
    def line(**extra: object) -> str:
        data = {"round": 0, "text": "Deploying.", "tools": ["deploy"], "input_tokens": 9}
        event = EventRecord(
            session_id="s",
            seq=1,
            type=EventType.MODEL_COMPLETED,
            turn_id="t",
            data={**data, "output_tokens": 2, **extra},
            at=time.time(),
        )
        described = describe(event, Style.plain())
        assert described is not None
        return described

    shown = line(thinking="Weigh the deploy first.", thinking_hidden=1)
    assert "(thinking: 23 chars, 1 hidden)" in shown
    assert "Weigh" not in shown
    assert "thinking" not in line()
