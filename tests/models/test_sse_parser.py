"""The SSE parser: line endings, chunk boundaries anywhere, multi-line data, comments, names."""

from __future__ import annotations

import asyncio

import pytest

from fxdurable.runtime.models.sse import SSEDecoder, SSEEvent, aiter_sse

STREAM = (
    ": a comment, then a keep-alive\n"
    ":\n"
    "event: message_start\n"
    'data: {"a": 1}\n'
    "\n"
    "data: line one\n"
    "data: line two\n"
    "data:\n"
    "data:no space\n"
    "id: 7\n"
    "\n"
    "event: ping\n"
    "\n"  # no data: not dispatched
    "data: wörld ✓\n"
    "retry: 3000\n"
    "\n"
    "data:  two spaces keep one\n"
    "unknown: field\n"
    "\n"
)
EXPECTED = [
    SSEEvent(data='{"a": 1}', event="message_start"),
    SSEEvent(data="line one\nline two\n\nno space", id="7"),
    SSEEvent(data="wörld ✓", id="7", retry=3000),
    SSEEvent(data=" two spaces keep one", id="7"),
]


def decode(chunks: list[bytes] | list[str]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


def one_byte(text: str) -> list[bytes]:
    data = text.encode()
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_line_endings(eol):
    assert decode([STREAM.replace("\n", eol).encode()]) == EXPECTED


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_one_byte_chunks_split_everything(eol):
    # splits every "\r\n" pair and every multi-byte UTF-8 character
    assert decode(one_byte(STREAM.replace("\n", eol))) == EXPECTED


@pytest.mark.parametrize("size", [2, 3, 5, 7, 11])
def test_any_chunk_boundaries(size):
    data = STREAM.replace("\n", "\r\n").encode()
    assert decode([data[i : i + size] for i in range(0, len(data), size)]) == EXPECTED


def test_text_chunks():
    assert decode(list(STREAM)) == EXPECTED


def test_final_event_without_blank_line_is_dispatched():
    assert decode([b"data: first\n\ndata: last"]) == [SSEEvent("first"), SSEEvent("last")]
    assert decode([b"data: last\n"]) == [SSEEvent("last")]
    assert decode([b"data: last\r"]) == [SSEEvent("last")]


def test_cr_at_chunk_end_then_lf_is_one_line_break():
    # "\r" ends the line at once; a "\n" that follows in the next chunk belongs to it
    events = decode([b"data: a\r", b"\n", b"\r", b"\ndata: b\r\n\r\n"])
    assert events == [SSEEvent("a"), SSEEvent("b")]


def test_bom_and_empty_input():
    assert decode([b"\xef\xbb\xbfdata: x\n\n"]) == [SSEEvent("x")]
    assert decode([]) == []
    assert decode([b"", b"\n\n"]) == []


def test_events_come_out_as_soon_as_complete():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\n") == [SSEEvent("a")]
    assert decoder.feed(b"data: b") == []
    assert decoder.close() == [SSEEvent("b")]


def test_long_line_one_byte_at_a_time_is_linear():
    payload = "x" * 200_000
    assert decode(one_byte(f"data: {payload}\n\n")) == [SSEEvent(payload)]


def test_aiter_sse():
    async def chunks():
        for piece in one_byte("event: e\ndata: 1\n\ndata: 2"):
            yield piece

    async def main():
        return [event async for event in aiter_sse(chunks())]

    assert asyncio.run(main()) == [SSEEvent("1", event="e"), SSEEvent("2")]


def _is_done(event: SSEEvent) -> bool:
    return event.data == "[DONE]"


@pytest.mark.parametrize("tail", ["data: [DONE]\n", "data: [DONE]", "data: [DONE]\r"])
def test_a_terminal_event_without_its_blank_line_can_be_taken(tail: str) -> None:
    decoder = SSEDecoder()
    assert decoder.feed('data: {"x": 1}\n\n' + tail) == [SSEEvent(data='{"x": 1}')]
    assert decoder.take_pending(_is_done) == SSEEvent(data="[DONE]")
    # What still comes for it (the rest of its line ending, the blank line) dispatches nothing.
    assert decoder.feed("\n\n") == []
    assert decoder.close() == []


def test_an_unfinished_event_not_recognised_as_last_is_left_alone() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: [DO") == []
    assert decoder.take_pending(_is_done) is None
    assert decoder.feed("NE]x\n") == []
    assert decoder.take_pending(_is_done) is None
    assert decoder.feed("data: more\n\n") == [SSEEvent(data="[DONE]x\nmore")]


def test_only_short_events_are_looked_at_as_possibly_last() -> None:
    decoder = SSEDecoder()
    decoder.feed("data: " + "x" * 300 + "\n")
    assert decoder.take_pending(lambda event: True) is None
