"""A real HTTP receiver for settlement webhooks (docs/webhooks.md): each POST is answered with
the next of its statuses (the last one after that) and kept, headers lower-cased, with its body.
The runtime tests and the worker tests share it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SECRET = "whsec-test-0123456789abcdef"


@dataclass
class Receiver:
    """Answers each POST with the next of ``statuses`` (the last one after)."""

    url: str
    statuses: list[int]
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, timeout), (
                f"{len(self.received)} of {count} webhooks arrived"
            )


@contextmanager
def receiving(statuses: tuple[int, ...] = (204,)) -> Iterator[Receiver]:
    """A receiver on a free port of 127.0.0.1 (its URL carries a token, as real ones do), for
    the block's length."""
    box: list[Receiver] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got = box[0]
            with got.arrived:
                status = got.statuses[min(len(got.received), len(got.statuses) - 1)]
                got.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                got.arrived.notify_all()
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(Receiver(f"http://127.0.0.1:{server.server_port}/hooks?token=t0p", list(statuses)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
