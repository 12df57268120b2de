"""A TCP proxy in front of a store's server that the soak can stall, black-hole or take down.

``FaultProxy(host, port)`` listens on a free port of 127.0.0.1 and forwards each connection to
``host:port`` with two pump threads. Its modes:

- ``open``: bytes flow;
- ``stall``: a paused server (or a congested link): bytes are read but held, and delivered in
  order when the proxy opens again; connections stay up, new ones are accepted;
- ``blackhole``: a partition: bytes vanish both ways, new connections are accepted but go
  nowhere; when it opens again every connection that lost bytes is closed (its stream is
  corrupt: as TCP would reset it), so clients see an error, never a wrong reply;
- ``down``: the server is gone: every connection is closed and new ones are refused (accepted
  and closed at once).

No ``sleep`` decides anything: pumps wait on a condition and on ``select`` with a short
timeout, so a mode change takes effect within ``_TICK_S``.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FaultProxy", "Mode"]

Mode = Literal["open", "stall", "blackhole", "down"]
_TICK_S = 0.1


@dataclass(eq=False)
class _Link:
    client: socket.socket
    upstream: socket.socket | None
    tainted: bool = False  # lost bytes in a black hole: closed when the proxy opens
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


class FaultProxy:
    """``with FaultProxy("127.0.0.1", 6379) as proxy: proxy.port; proxy.set_mode("stall")``."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._mode: Mode = "open"
        self._cond = threading.Condition()
        self._links: set[_Link] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._stopped = False
        self._acceptor = threading.Thread(target=self._accept, name="soak-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def mode(self) -> Mode:
        return self._mode

    def start(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def set_mode(self, mode: Mode) -> None:
        with self._cond:
            self._mode = mode
            doomed = [
                link for link in self._links if mode == "down" or (mode == "open" and link.tainted)
            ]
            self._cond.notify_all()
        for link in doomed:
            self._drop(link)

    def close(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.set_mode("down")

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the pumps ---------------------------------------------------------------------------

    def _drop(self, link: _Link) -> None:
        with self._cond:
            self._links.discard(link)
        link.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._mode == "down":
                client.close()
                continue
            link = _Link(client, None)
            with self._cond:
                self._links.add(link)
            threading.Thread(target=self._pump, args=(link, True), daemon=True).start()

    def _connect(self, link: _Link) -> bool:
        """The upstream connection, opened with the first bytes to forward (not at accept): a
        server that serves one connection at a time (the serial moto server) must never wait
        on a connection whose request the proxy is holding."""
        try:
            link.upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            return False
        link.upstream.settimeout(None)
        threading.Thread(target=self._pump, args=(link, False), daemon=True).start()
        return True

    def _pump(self, link: _Link, outbound: bool) -> None:
        """Client → upstream when ``outbound``, else upstream → client."""
        try:
            while not link.closed:
                src = link.client if outbound else link.upstream
                assert src is not None
                ready, _, _ = select.select([src], [], [], _TICK_S)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                with self._cond:
                    while self._mode == "stall" and not link.closed:
                        self._cond.wait(_TICK_S)
                    mode = self._mode
                if mode == "blackhole" or link.tainted:
                    link.tainted = True  # its stream lost bytes: closed when the proxy opens
                    continue
                if mode == "down":
                    break
                if outbound and link.upstream is None and not self._connect(link):
                    break
                dst = link.upstream if outbound else link.client
                assert dst is not None
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._drop(link)
