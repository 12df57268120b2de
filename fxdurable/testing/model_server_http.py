"""The HTTP side of the scripted model server: a stdlib threading server that carries out a
:data:`Reply` decided elsewhere (``ScriptedModelServer._respond``, which does no I/O).

HTTP/1.1 with chunked transfer encoding: every write is one HTTP chunk sent at once (the
socket is unbuffered and Nagle is off), so a streaming client sees each chunk as it is written,
and a response whose terminating chunk has not been sent has really not ended. ``stop`` cuts
every open connection, so nothing held open can make it hang.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias

from fxdurable.testing.wire_common import Quirks

__all__ = ["JsonReply", "ModelHTTPServer", "Reply", "Responder", "Stall", "StreamReply"]

logger = logging.getLogger("fxdurable.testing.model_server")


@dataclass(frozen=True, slots=True)
class JsonReply:
    status: int
    body: object
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A 200 event stream: ``events`` written as the quirks say, then ``hold_s`` of silence,
    then the end of the body (``"end"``) or the socket cut mid-body (``"cut"``)."""

    events: list[bytes]
    quirks: Quirks
    hold_s: float = 0.0
    ending: Literal["end", "cut"] = "end"


@dataclass(frozen=True, slots=True)
class Stall:
    """No answer at all for ``seconds``; then the connection is closed."""

    seconds: float


Reply: TypeAlias = JsonReply | StreamReply | Stall
# (method, path, lower-cased headers, body) -> what to answer
Responder: TypeAlias = Callable[[str, str, dict[str, str], bytes], Reply]


class ModelHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # close() cuts and joins the handlers itself

    def __init__(self, address: tuple[str, int], respond: Responder) -> None:
        super().__init__(address, _Handler)
        self.respond = respond
        self.stopping = threading.Event()
        self._open: dict[socket.socket, threading.Thread] = {}
        self._open_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model-server:{self.server_address[1]}",
            daemon=True,
        )
        self._thread.start()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-stream (it stopped reading at the finish, as it should)
        is normal here: no traceback on stderr. Anything else is still reported."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop accepting, cut every open connection (held-open streams included), and wait
        briefly for the handlers, which return as soon as their socket is gone."""
        self.shutdown()
        with self._open_lock:
            open_ = dict(self._open)
        for sock in open_:
            with contextlib.suppress(OSError):  # already gone
                sock.shutdown(socket.SHUT_RDWR)
        self.stopping.set()  # after the cut: a held stream must not get to end cleanly
        self.server_close()
        self._thread.join()
        deadline = time.monotonic() + 2.0
        for handler in open_.values():
            handler.join(max(0.0, deadline - time.monotonic()))

    def _track(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open[sock] = threading.current_thread()

    def _untrack(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.pop(sock, None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ModelHTTPServer

    def setup(self) -> None:
        super().setup()
        # Small writes go out at once: no Nagle delay between one-byte chunks.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server._untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self._read_body())

    def _answer(self, raw: bytes) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = self.server.respond(self.command, self.path, headers, raw)
        try:
            if isinstance(reply, Stall):
                self.server.stopping.wait(reply.seconds)
                self.close_connection = True
            elif isinstance(reply, JsonReply):
                self._json(reply)
            else:
                self._stream(reply)
        except OSError:  # the client went away, or stop() cut the connection
            self.close_connection = True

    def _json(self, reply: JsonReply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status, "Overloaded" if reply.status == 529 else None)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, reply: StreamReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        quirks, stopping = reply.quirks, self.server.stopping
        for event in reply.events:
            if quirks.event_delay_s:
                stopping.wait(quirks.event_delay_s)
            self._write(event, quirks)
        if reply.ending == "cut":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # no terminating chunk
            return
        if reply.hold_s > 0:
            # The stream has said all it will, but has not ended: no bytes, no close.
            stopping.wait(reply.hold_s)
        self.wfile.write(b"0\r\n\r\n")

    def _write(self, data: bytes, quirks: Quirks) -> None:
        """``data`` as HTTP chunks of ``chunk_bytes`` (all of it in one when 0); each is on
        the wire when ``write`` returns."""
        size = quirks.chunk_bytes if quirks.chunk_bytes > 0 else len(data)
        for start in range(0, len(data), size):
            piece = data[start : start + size]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if quirks.chunk_delay_s:
                self.server.stopping.wait(quirks.chunk_delay_s)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))
