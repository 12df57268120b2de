"""Raw HTTP/1.1 over a socket, for the requests httpx refuses to send or cannot send on purpose:
header values that are not ASCII, a body shorter than its ``Content-Length``, a body that
stalls half way. The answer is parsed with h11 (what uvicorn itself parses with)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import h11

Header = tuple[bytes, bytes]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def request_head(
    method: str, target: str, headers: Sequence[Header], *, content_length: int | None = None
) -> bytes:
    """The request line and headers, byte for byte as given (no validation, no encoding)."""
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers]
    if content_length is not None:
        lines.append(b"Content-Length: " + str(content_length).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


@contextlib.contextmanager
def connected(port: int, *, timeout_s: float) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        yield sock


def read_answer(sock: socket.socket, method: str = "GET") -> Answer:
    """Read one response from ``sock`` (raises ``TimeoutError`` after the socket's timeout,
    ``AssertionError`` if the server closes without answering)."""
    conn = h11.Connection(h11.CLIENT)
    # h11 parses a response only after a request of its own: a stand-in for the raw one sent.
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "127.0.0.1")]))
    conn.send(h11.EndOfMessage())
    status, headers, body = 0, {}, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
            headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return Answer(status, headers, bytes(body))
        else:
            raise AssertionError(f"the server closed the connection without an answer: {event}")


def exchange(
    port: int,
    method: str,
    target: str,
    headers: Sequence[Header],
    body: bytes = b"",
    *,
    timeout_s: float,
) -> Answer:
    """Send one request as raw bytes and read its answer."""
    with connected(port, timeout_s=timeout_s) as sock:
        head = request_head(method, target, headers, content_length=len(body) if body else None)
        sock.sendall(head + body)
        return read_answer(sock, method)


def hang_up_mid_body(
    port: int, method: str, target: str, headers: Sequence[Header], body: bytes
) -> None:
    """Declare ``body``, send half of it, and close the connection."""
    with connected(port, timeout_s=5.0) as sock:
        head = request_head(method, target, headers, content_length=len(body) + 1)
        sock.sendall(head + body[: len(body) // 2])


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (after its answer): nothing more to read."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
