"""Helpers for the provider tests (a plain module; tests/models is on sys.path).

Providers are served through ``httpx.MockTransport``: the real client code runs, only the
socket is replaced. A :class:`Reply` says how a canned body is streamed (chunk size, whether
the stream stays open after the body) and :class:`FakeProvider` records what was sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from fxdurable.runtime.models import aclose_clients
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolSpec,
)

T = TypeVar("T")

SECRET = "sk-test-SECRET-0123456789abcdef"


def run(coro: Awaitable[T], timeout: float = 10.0) -> T:
    """Run ``coro`` in a fresh loop, closing the loop's shared HTTP clients before it ends."""

    async def bounded() -> T:
        try:
            async with asyncio.timeout(timeout):
                return await coro
        finally:
            await aclose_clients()

    return asyncio.run(bounded())


@dataclass
class Reply:
    """One canned response. ``chunk`` splits the body into pieces of that many bytes;
    ``hang`` keeps the stream open after the body (a server that does not close);
    ``fail`` raises that exception after the body instead of ending."""

    body: str | bytes = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    chunk: int | None = None
    hang: bool = False
    fail: Exception | None = None


class TrackedStream(httpx.AsyncByteStream):
    def __init__(self, reply: Reply) -> None:
        self._reply = reply
        self.closed = False
        self.sent_all = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        data = self._reply.body
        raw = data.encode() if isinstance(data, str) else data
        size = self._reply.chunk or max(1, len(raw))
        for start in range(0, len(raw), size):
            yield raw[start : start + size]
            await asyncio.sleep(0)
        self.sent_all = True
        if self._reply.fail is not None:
            raise self._reply.fail
        if self._reply.hang:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


class FakeProvider:
    """Answers request *n* with ``replies[n]`` (the last one repeats); records the requests."""

    def __init__(self, *replies: Reply | Callable[[httpx.Request], Any]) -> None:
        self._replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.streams: list[TrackedStream] = []
        self.transport = httpx.MockTransport(self._handle)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self._replies[min(len(self.requests), len(self._replies)) - 1]
        if not isinstance(reply, Reply):
            return reply(request)  # type: ignore[no-any-return]
        stream = TrackedStream(reply)
        self.streams.append(stream)
        headers = {"content-type": reply.content_type, **reply.headers}
        return httpx.Response(reply.status, headers=headers, stream=stream)


async def collect(model: Model, request: ModelRequest) -> tuple[list[str], ModelResponse]:
    """Read a stream the way the runtime does: stop at the first Finish, then ``aclose``."""
    deltas: list[str] = []
    stream = model.stream(request)
    try:
        async for part in stream:
            if isinstance(part, Finish):
                return deltas, part.response
            assert isinstance(part, TextDelta)
            deltas.append(part.text)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    raise AssertionError("the stream ended without a Finish")


async def all_parts(model: Model, request: ModelRequest) -> list[TextDelta | Finish]:
    """Every part the stream yields, read to its end."""
    return [part async for part in model.stream(request)]


def request(text: str = "hi", *, messages: Sequence[ChatMessage] | None = None) -> ModelRequest:
    return ModelRequest(
        instructions="be brief",
        messages=list(messages) if messages is not None else [ChatMessage(role="user", text=text)],
        tools=[
            ToolSpec(
                name="get_weather",
                description="Weather for a city",
                parameters={
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            )
        ],
    )


def sse_data(*payloads: object) -> str:
    """``data:`` events, one per payload (JSON-encoded unless already a string)."""
    return "".join(f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n" for p in payloads)


def elapsed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
