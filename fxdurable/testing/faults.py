"""A fault-injecting TCP proxy in front of a store's (or queue's) server.

``FaultProxy(host, port)`` listens on a free port of 127.0.0.1 and forwards each connection to
``host:port`` with two pump threads; the upstream connection opens with the first bytes to
forward, not at accept (a server that serves one connection at a time, the serial moto server,
must never wait on a connection whose request the proxy is holding). Its modes, for outages:

- ``open``: bytes flow;
- ``stall``: a paused server or a partitioned link (:meth:`pause`): bytes are read but held,
  and delivered in order when the proxy opens again, so a request a client gave up on may
  still land late, as it can in production; connections stay up, new ones are accepted and
  wait;
- ``blackhole``: bytes vanish both ways, new connections are accepted but go nowhere; when it
  opens again every connection that lost bytes is closed (its stream is corrupt: as TCP would
  reset it), so clients see an error, never a wrong reply;
- ``down``: the server is gone: every connection is closed and new ones are refused (accepted
  and closed at once).

And for one request (:meth:`lose_answer`), the fault a store must treat as an *unknown
outcome*: the next request whose bytes contain a marker reaches the server, which applies it,
and its answer is lost: the connection is closed once the server has answered (``drop``), or
the answer is held until the client gives up and closes it (``stall``, a client timeout). Or
the request itself is held (``late``): the client times out, and only once it has closed the
connection and its next request with the marker (its resend) has been answered does the held
one reach the server (as a segment delayed in the network can), its answer lost;
:attr:`FaultProxy.landed_late` is set when the server has answered it.

No ``sleep`` decides anything: pumps wait on a condition and on ``select`` with a short
timeout, so a mode change takes effect within ``_TICK_S``.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Answer", "FaultProxy", "Mode"]

Mode = Literal["open", "stall", "blackhole", "down"]
Answer = Literal["drop", "stall", "late"]
_TICK_S = 0.1


@dataclass(eq=False)
class _Link:
    client: socket.socket
    upstream: socket.socket | None
    tainted: bool = False  # lost bytes in a black hole: closed when the proxy opens
    losing: Answer | None = None  # the answer to the request just forwarded is lost so
    held: bytearray = field(default_factory=bytearray)  # a "late" request, not yet forwarded
    resending: bool = False  # carries the resend a held late request waits for
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
    """``with FaultProxy("127.0.0.1", 6379) as proxy: proxy.port; proxy.set_mode("stall")``.

    Forwards from construction; closing it (or leaving the ``with``) stops every connection.
    """

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
        self._armed: tuple[bytes, Answer] | None = None
        self._then: Mode | None = None  # the mode a dropped answer leaves the proxy in
        self.lost = 0  # requests forwarded whose answer the client never got
        self.landed_late = threading.Event()  # a "late" request reached the server, answered
        self._late: bytes | None = None  # the marker of a held late request
        self._resent = threading.Event()  # the resend it waits for was answered
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._acceptor.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def away(self) -> bool:
        return self._mode != "open"

    def start(self) -> FaultProxy:
        """It already forwards: for ``with`` and callers written for a separate start."""
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

    def pause(self) -> None:
        """From now on nothing gets through, either way, until :meth:`resume`."""
        self.set_mode("stall")

    def resume(self) -> None:
        self.set_mode("open")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def lose_answer(self, marker: bytes, how: Answer = "drop", *, then: Mode | None = None) -> None:
        """The next request whose bytes contain ``marker`` is forwarded and its answer lost
        (``drop``: the connection closed when the server answers; ``stall``: the answer held
        until the client closes the connection; ``late``: the request held until the client
        closes the connection, then forwarded). :attr:`lost` counts them. With ``drop``,
        ``then`` is the mode the proxy is in before the client learns of the loss (``down``:
        the server cannot be asked what became of the request)."""
        with self._cond:
            self._armed = (marker, how)
            self._then = then

    def close(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.set_mode("down")

    def __enter__(self) -> FaultProxy:
        return self

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
        try:
            link.upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            return False
        link.upstream.settimeout(None)
        threading.Thread(target=self._pump, args=(link, False), daemon=True).start()
        return True

    def _take_fault(self, link: _Link, data: bytes) -> Answer | None:
        with self._cond:
            if self._late is not None and self._late in data:
                link.resending = True
            if self._armed is None or self._armed[0] not in data:
                return None
            marker, how = self._armed
            self._armed = None
            self.lost += 1
            if how == "late":
                self._late = marker
            return how

    def _deliver_late(self, link: _Link) -> None:
        """The client gave up on a held request and closed: now it reaches the server."""
        assert link.upstream is not None
        self._resent.wait(5.0)  # after the resend: the order the token must survive
        link.upstream.sendall(bytes(link.held))
        link.held.clear()
        self.landed_late.wait(5.0)  # its answer, swallowed by the other pump

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
                    if outbound and link.held:
                        self._deliver_late(link)
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
                if outbound and link.losing is None:
                    link.losing = self._take_fault(link, data)
                if outbound and link.losing == "late":
                    link.held += data
                    continue
                if not outbound and link.losing == "late":
                    self.landed_late.set()  # the server answered the late request: lost too
                    continue
                if not outbound and link.resending:
                    self._resent.set()
                if not outbound and link.losing == "drop":
                    # The server answered (so it applied the request): lose it.
                    if self._then is not None:
                        self.set_mode(self._then)
                    break
                if not outbound and link.losing == "stall":
                    continue  # swallowed; the client times out and closes its side
                dst = link.upstream if outbound else link.client
                assert dst is not None
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._drop(link)
