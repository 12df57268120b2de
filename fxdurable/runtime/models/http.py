"""The HTTP crossing for model providers: one shared client per event loop, explicit timeouts,
and a streaming POST read as SSE events under a total deadline.

An ``httpx.AsyncClient`` belongs to the loop it first ran in (its connections do), so there is
one per running loop, made on first use; a loop that has closed loses its client. Call
:func:`aclose_clients` before a loop ends to close the current loop's client and its
connections (``Runtime`` shutdown is the place).

Every read of a stream is bounded by the request's total deadline, applied per read rather
than as one scope around the generator: a cancel scope held open across ``yield`` would fire
in the consumer's code instead of ours.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from fxdurable.runtime.models.errors import ERROR_BODY_LIMIT, status_error, transport_error
from fxdurable.runtime.models.sse import SSEDecoder, SSEEvent

__all__ = [
    "EventSource",
    "Timeouts",
    "aclose_clients",
    "display_url",
    "open_event_stream",
    "shared_client",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Seconds. ``read`` is the longest silence between two chunks (a model may think quietly
    for a while before its first token); ``total`` bounds one whole model call."""

    connect: float = 10.0
    read: float = 120.0
    write: float = 30.0
    pool: float = 10.0
    total: float = 600.0

    def httpx_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


_Clients = dict[httpx.AsyncBaseTransport | None, httpx.AsyncClient]
_lock = threading.Lock()
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Clients] = (
    weakref.WeakKeyDictionary()
)


def shared_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The running loop's client (one per ``transport``; ``None`` is the network)."""
    loop = asyncio.get_running_loop()
    with _lock:
        for stale in [other for other in _by_loop if other.is_closed()]:
            # Its connections died with their loop; nothing can close them from here.
            del _by_loop[stale]
        clients = _by_loop.setdefault(loop, {})
        client = clients.get(transport)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(transport=transport, follow_redirects=False)
            clients[transport] = client
        return client


async def aclose_clients() -> None:
    """Close the running loop's clients and their pooled connections. Safe to call twice;
    a later model call makes a fresh client."""
    loop = asyncio.get_running_loop()
    with _lock:
        clients = _by_loop.pop(loop, {})
    for client in clients.values():
        await client.aclose()


class EventSource(Protocol):
    """The events of one response, as a provider parser reads them."""

    async def next(self) -> SSEEvent | None:
        """The next event, or ``None`` when the stream has ended. Transport failures and the
        total deadline raise model errors."""
        ...

    async def next_within(self, seconds: float) -> SSEEvent | None:
        """The next event if it comes within ``seconds``; ``None`` at the end of the stream,
        at the timeout, or if the connection breaks. For after the finish, when the response
        is complete and whatever follows is a bonus (usage) or noise."""
        ...


class _StreamEvents:
    """The SSE events of a streaming response; every read honours the total deadline."""

    def __init__(
        self,
        response: httpx.Response,
        *,
        provider: str,
        url: str,
        deadline: float,
        total: float,
        is_last: Callable[[SSEEvent], bool],
    ) -> None:
        self._chunks = response.aiter_bytes()
        self._is_last = is_last
        self._decoder = SSEDecoder()
        self._queue: deque[SSEEvent] = deque()
        self._ended = False
        self._provider = provider
        self._url = url
        self._deadline = deadline
        self._total = total

    async def next(self) -> SSEEvent | None:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._next()
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self._provider, exc, url=self._url, total_s=self._total) from exc

    async def next_within(self, seconds: float) -> SSEEvent | None:
        try:
            async with asyncio.timeout_at(min(self._deadline, _now() + seconds)):
                return await self._next()
        except (httpx.HTTPError, TimeoutError):
            self._ended = True
            return None

    async def _next(self) -> SSEEvent | None:
        while not self._queue:
            if self._ended:
                return None
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                self._queue.extend(self._decoder.close())
            else:
                self._queue.extend(self._decoder.feed(chunk))
                # The provider's last event may come without its blank line on a stream held
                # open: it ends the response now, not when a timer runs out.
                last = self._decoder.take_pending(self._is_last)
                if last is not None:
                    self._queue.append(last)
        return self._queue.popleft()


@asynccontextmanager
async def open_event_stream(
    *,
    provider: str,
    url: str,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    timeouts: Timeouts,
    transport: httpx.AsyncBaseTransport | None,
    secret: str | None,
    key_env: str,
    is_last: Callable[[SSEEvent], bool] = lambda event: False,
) -> AsyncIterator[EventSource]:
    """POST ``body`` as JSON and yield the response's events; the response is closed on exit.
    ``is_last`` recognises the provider's terminal event, which is delivered even when no
    blank line follows it.

    A non-2xx status raises the mapped error (see :mod:`fxdurable.runtime.models.errors`).
    """
    client = shared_client(transport)
    shown = display_url(url)
    deadline = _now() + timeouts.total
    try:
        request = client.build_request(
            "POST",
            url,
            headers={**headers, "accept": "text/event-stream"},
            content=json.dumps(body).encode(),
            timeout=timeouts.httpx_timeout(),
        )
        async with asyncio.timeout_at(deadline):
            response = await client.send(request, stream=True)
    except (httpx.HTTPError, httpx.InvalidURL, TimeoutError, UnicodeError) as exc:
        raise transport_error(
            provider, exc, url=shown, total_s=timeouts.total, secret=secret
        ) from None  # the chained original may quote a header, and with it the key
    try:
        if not response.is_success:
            text = await _read_capped(response, deadline)
            raise status_error(
                provider=provider,
                status=response.status_code,
                headers=response.headers,
                body=text,
                url=shown,
                secret=secret,
                key_env=key_env,
            )
        if response.headers.get("content-type", "").startswith("application/json"):
            # Not a stream: a proxy answering with a JSON error (or a server ignoring
            # "stream": true). The caller's parser reads the body as one data event.
            text = await _read_capped(response, deadline)
            yield _OneEvent(text)
            return
        yield _StreamEvents(
            response,
            provider=provider,
            url=shown,
            deadline=deadline,
            total=timeouts.total,
            is_last=is_last,
        )
    finally:
        await response.aclose()


class _OneEvent:
    """A whole JSON body presented as a single data event, then the end."""

    def __init__(self, data: str) -> None:
        self._data: str | None = data

    async def next(self) -> SSEEvent | None:
        data, self._data = self._data, None
        return None if data is None else SSEEvent(data=data)

    async def next_within(self, seconds: float) -> SSEEvent | None:
        return await self.next()


async def _read_capped(response: httpx.Response, deadline: float) -> str:
    """At most :data:`ERROR_BODY_LIMIT` bytes of the body; whatever arrived if reading fails."""
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout_at(deadline):
            async for chunk in response.aiter_bytes():
                parts.append(chunk)
                size += len(chunk)
                if size >= ERROR_BODY_LIMIT:
                    break
    except (httpx.HTTPError, TimeoutError):
        pass
    return b"".join(parts)[:ERROR_BODY_LIMIT].decode("utf-8", errors="replace")


def display_url(url: str) -> str:
    """``url`` without user name, password or query (where keys hide), for messages and
    reprs."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return url
    if parsed.userinfo or parsed.query:
        return str(parsed.copy_with(username=None, password=None, query=None))
    return url


def _now() -> float:
    return asyncio.get_running_loop().time()
