"""Byte streams written in the test, served over a real socket (a plain module; tests/models is
on sys.path).

:class:`RawStreams` is the scripted model server's HTTP side (:class:`ModelHTTPServer`) with a
responder that answers the *n*-th POST with the *n*-th reply given (the last one repeats) and
keeps every request body: the real httpx client, the SSE decoder and the provider parsers read
exactly the bytes a test wrote, chunked as it says (one byte per HTTP chunk, say) and held open
after the last event as long as it says.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from fxdurable.testing.model_server_http import JsonReply, ModelHTTPServer, Reply, StreamReply
from fxdurable.testing.wire_common import Quirks

HOLD_S = 60.0  # "held open": far longer than any test may take, so only a prompt finish passes


def openai_chunk(delta: dict[str, Any] | None = None, *, finish: str | None = None) -> str:
    """One ``chat.completion.chunk`` event, as OpenAI-compatible servers send it."""
    payload = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n"


def openai_tool_fragment(
    arguments: str, *, index: int = 0, id_: str | None = None, name: str | None = None
) -> str:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id_ is not None:
        fragment.update(id=id_, type="function")
    if name is not None:
        fragment["function"]["name"] = name
    return openai_chunk({"tool_calls": [fragment]})


def openai_usage(prompt: int = 20, completion: int = 7) -> str:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    payload = {"id": "chatcmpl-raw", "object": "chat.completion.chunk", "choices": []}
    return f"data: {json.dumps(payload | {'usage': usage})}\n\n"


def anthropic_event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def anthropic_start(input_tokens: int = 30) -> str:
    message = {
        "id": "msg_raw",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-x",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return anthropic_event({"type": "message_start", "message": message})


def anthropic_tool_use(index: int, id_: str, name: str, *partials: str) -> str:
    block = {"type": "tool_use", "id": id_, "name": name, "input": {}}
    start = anthropic_event({"type": "content_block_start", "index": index, "content_block": block})
    deltas = "".join(
        anthropic_event(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": partial},
            }
        )
        for partial in partials
    )
    return start + deltas


def anthropic_stop(stop_reason: str, output_tokens: int = 9) -> str:
    """``message_delta`` with the stop reason, then ``message_stop``."""
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return anthropic_event(delta) + anthropic_event({"type": "message_stop"})


def stream(body: str, *, chunk_bytes: int = 0, hold_s: float = 0.0) -> StreamReply:
    """``body`` as one 200 event stream: in HTTP chunks of ``chunk_bytes`` (0: all at once),
    then ``hold_s`` of silence with the response still open."""
    return StreamReply(
        events=[body.encode()], quirks=Quirks(chunk_bytes=chunk_bytes), hold_s=hold_s
    )


class RawStreams:
    """Answers POST number *n* with ``replies[n]`` (the last repeats); keeps the bodies."""

    def __init__(self, *replies: Reply) -> None:
        if not replies:
            raise ValueError("at least one reply")
        self._replies: Sequence[Reply] = replies
        self._lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self._server: ModelHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use RawStreams as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> RawStreams:
        self._server = ModelHTTPServer(("127.0.0.1", 0), self._respond)
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    def _respond(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method != "POST":
            return JsonReply(404, {"error": {"message": f"no {method} {path}"}})
        with self._lock:
            self.bodies.append(json.loads(raw))
            return self._replies[min(len(self.bodies), len(self._replies)) - 1]
