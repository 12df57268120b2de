"""An incremental Server-Sent-Events parser (the WHATWG ``text/event-stream`` format).

Chunks may split anything: a line, a ``\\r\\n`` pair, a multi-byte UTF-8 character. The
decoder keeps only the unfinished line, so feeding one byte at a time stays linear.
Two deliberate departures from the spec, because providers do send streams that way: an
event still open when the stream ends (no trailing blank line) is dispatched, and
:meth:`SSEDecoder.take_pending` hands over an event not yet ended by a blank line when the
caller recognises it as the provider's last (``[DONE]``, ``message_stop``) on a stream held
open after it.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent", "aiter_sse"]

_EOL = re.compile(r"\r\n|\r|\n")
# An event longer than this is never a terminal one: bounds the cost of looking at the
# unfinished event after every chunk (one-byte chunks included).
_PENDING_LIMIT = 256


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
        self._partial_len = 0
        self._pending_cr = False  # the last chunk ended in "\r": a "\n" next belongs to it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._data_len = 0
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        return self._feed_text(text)

    def close(self) -> list[SSEEvent]:
        """Flush: the last line and a last event that had no blank line after it."""
        events = self._feed_text(self._utf8.decode(b"", final=True))
        if self._partial:
            line = self._take_line()
            self._line(line, events)
        self._dispatch(events)
        return events

    def take_pending(self, is_last: Callable[[SSEEvent], bool]) -> SSEEvent | None:
        """The event fed so far but not yet ended by a blank line (its unfinished last line
        read as if it had ended), if ``is_last`` accepts it; it is then dispatched. For a
        provider's terminal event on a stream that is held open without the blank line."""
        if self._partial_len + self._data_len > _PENDING_LIMIT:
            return None
        data = list(self._data)
        event = self._event
        line = "".join(self._partial)
        if line:
            name, value = _field(line)
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
        if not data:
            return None
        candidate = SSEEvent(data="\n".join(data), event=event or "message", id=self._id)
        if not is_last(candidate):
            return None
        # Taken: whatever still comes for this event (the rest of its line, the blank line)
        # ends an empty one, which dispatches nothing.
        self._take_line()
        self._reset_event()
        return candidate

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
            line = self._take_line()
            self._line(line, events)
            start = match.end()
        if start < len(text):
            self._partial.append(text[start:])
            self._partial_len += len(text) - start
        self._pending_cr = text.endswith("\r")
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # a comment (keep-alives are sent this way)
        name, value = _field(line)
        if name == "data":
            self._data.append(value)
            self._data_len += len(value)
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
        self._reset_event()

    def _reset_event(self) -> None:
        # "id" persists across events (it is the last event id); the rest is per event
        self._event = ""
        self._data = []
        self._data_len = 0
        self._retry = None

    def _take_line(self) -> str:
        line = "".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        return line


def _field(line: str) -> tuple[str, str]:
    """A non-empty, non-comment line as ``(field name, value)``."""
    name, colon, value = line.partition(":")
    return name, value.removeprefix(" ") if colon else value


async def aiter_sse(chunks: AsyncIterable[bytes | str]) -> AsyncIterator[SSEEvent]:
    """The events of a stream of chunks, as they complete."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
