"""An incremental Server-Sent-Events parser (the WHATWG ``text/event-stream`` format).

Chunks may split anything: a line, a ``\\r\\n`` pair, a multi-byte UTF-8 character. The
decoder keeps only the unfinished line, so feeding one byte at a time stays linear.
One deliberate departure from the spec: an event still open when the stream ends (no
trailing blank line) is dispatched, because providers do end streams that way.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent", "aiter_sse"]

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is ``"message"`` unless an ``event:`` field named it."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed chunks in, get complete events out; call :meth:`close` at the end of the stream."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # the current, unfinished line, in pieces
        self._pending_cr = False  # the last chunk ended in "\r": a "\n" next belongs to it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        return self._feed_text(text)

    def close(self) -> list[SSEEvent]:
        """Flush: the last line and a last event that had no blank line after it."""
        events = self._feed_text(self._utf8.decode(b"", final=True))
        if self._partial:
            line = "".join(self._partial)
            self._partial.clear()
            self._line(line, events)
        self._dispatch(events)
        return events

    def _feed_text(self, text: str) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not text:
            return events
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._pending_cr:
            self._pending_cr = False
            if text.startswith("\n"):
                text = text[1:]
        start = 0
        for match in _EOL.finditer(text):
            self._partial.append(text[start : match.start()])
            line = "".join(self._partial)
            self._partial.clear()
            self._line(line, events)
            start = match.end()
        if start < len(text):
            self._partial.append(text[start:])
        self._pending_cr = text.endswith("\r")
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # a comment (keep-alives are sent this way)
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        # any other field name is ignored, as the spec says

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:  # the spec: an event without data is not dispatched
            events.append(
                SSEEvent(
                    data="\n".join(self._data),
                    event=self._event or "message",
                    id=self._id,
                    retry=self._retry,
                )
            )
        # "id" persists across events (it is the last event id); the rest is per event
        self._event = ""
        self._data = []
        self._retry = None


async def aiter_sse(chunks: AsyncIterable[bytes | str]) -> AsyncIterator[SSEEvent]:
    """The events of a stream of chunks, as they complete."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
