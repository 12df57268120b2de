"""A deterministic, offline model for tests and the demo.

It is driven by a *policy*: a function from the request (the conversation so far) to the
response. Because it reacts to the conversation rather than replaying a fixed list, it behaves
like a model would after a recovery: told an operation's outcome is unknown, it inspects.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextDelta,
    opens_turn,
    without_interruptions,
)

__all__ = ["ScriptedModel", "call", "reply"]

Policy = Callable[[ModelRequest], ModelResponse]


def call(name: str, /, **arguments: object) -> ToolCallRequest:
    """A tool call for a scripted response."""
    return ToolCallRequest(name=name, arguments=json.dumps(arguments, sort_keys=True))


def reply(text: str = "", *calls: ToolCallRequest) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=tuple(calls))


class ScriptedModel:
    """A model whose answers come from ``policy`` (or from a list, one per call in a turn).

    ``chunk_size`` splits the text into deltas so streaming paths (and the
    ``model.mid-stream`` crash point) are exercised; ``delay_s`` sleeps between deltas.
    ``requests`` keeps the last ``keep_requests`` requests (oldest first), so a long session
    does not hold every request it ever sent: each one repeats the conversation.
    """

    def __init__(
        self,
        policy: Policy | Sequence[ModelResponse],
        *,
        name: str = "scripted",
        chunk_size: int = 16,
        delay_s: float = 0.0,
        keep_requests: int = 100,
    ) -> None:
        self._policy = policy if callable(policy) else _from_list(list(policy))
        self._name = name
        self._chunk_size = max(1, chunk_size)
        self._delay_s = delay_s
        # For tests: what the model was shown, the most recent ``keep_requests`` of it.
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)
        self._counted: list[ChatMessage] = []  # the messages of the last request counted
        self._counted_words = 0

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        self.requests.append(request)
        response = self._policy(request)
        text = response.text
        for start in range(0, len(text), self._chunk_size):
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
            yield TextDelta(text[start : start + self._chunk_size])
        words = self._input_words(request.messages)
        usage = Usage(
            input_tokens=words, output_tokens=len(text.split()) + len(response.tool_calls)
        )
        # The policy's own stop reason and content go through (a paused response, say).
        yield Finish(replace(response, usage=usage))

    def _input_words(self, messages: Sequence[ChatMessage]) -> int:
        """The words of ``messages``, counting only what is new when they extend the previous
        request's messages (the usual case: a conversation grows at its end), so a call costs
        what it adds, not the length of the conversation."""
        before = self._counted
        n = len(before)
        current = list(messages)
        # A list comparison in C, identity first: cheap when the runtime hands out the same
        # message objects again, and exact (a changed message anywhere means a full count).
        if 0 < n <= len(current) and current[:n] == before:
            words = self._counted_words + _words(current[n:])
        else:
            words = _words(current)
        self._counted, self._counted_words = current, words
        return words


def _words(messages: Sequence[ChatMessage]) -> int:
    return sum(len(m.text.split()) for m in messages)


def turn_messages(request: ModelRequest) -> list[ChatMessage]:
    """The messages since the last user message: the current turn, as a policy sees it. A
    reply a crash cut off and the note after it are left out: the policy answers the round
    as if the stream had never been cut."""
    everything = request.messages
    start = len(everything) - 1
    # Scan back to the last user message that is not the note after a cut-off reply or a
    # rejected answer: the turn so far, however long the conversation before it.
    while start > 0 and not opens_turn(everything[start]):
        start -= 1
    messages = without_interruptions(everything[max(start, 0) :])
    for i in range(len(messages) - 1, -1, -1):
        if opens_turn(messages[i]):
            return messages[i:]
    return messages


def _from_list(responses: list[ModelResponse]) -> Policy:
    def policy(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in turn_messages(request) if m.role == "assistant")
        if done < len(responses):
            return responses[done]
        return reply("(script exhausted)")

    return policy
