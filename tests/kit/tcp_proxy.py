"""A TCP proxy the test process puts between worker processes and a server, to make the server
*away* on demand: the honest store outage (docs/leases.md).

While :meth:`TcpProxy.pause`\\ d it moves no byte in either direction and opens no upstream
connection (the kernel still accepts new ones; nothing is read from them), which is how a
partitioned network or a stalled server looks to a client: every call waits out its own
timeout. Bytes read just before the pause are held and delivered after :meth:`resume`, so a
request a client gave up on may still land late, as it can in production.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["TcpProxy"]

_POLL_S = 0.1


class TcpProxy:
    """``TcpProxy(host, port)`` listens on ``127.0.0.1:<self.port>`` and forwards to
    ``host:port``. Use as a context manager (closing stops every connection)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def away(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        """From now on nothing gets through, either way."""
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        self._closed.set()
        self._open.set()  # release every pump, which then sees the close
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    # -- the pumps -----------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._wait_open()
        if self._closed.is_set():
            client.close()
            return
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, upstream]
        for src, dst in ((client, upstream), (upstream, client)):
            src.settimeout(_POLL_S)
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _wait_open(self) -> None:
        while not self._open.wait(_POLL_S):
            if self._closed.is_set():
                return

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                self._wait_open()
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                self._wait_open()  # read just before a pause: held until the resume
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
