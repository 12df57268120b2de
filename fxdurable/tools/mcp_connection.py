"""One connection per MCP server per process, held by a thread of its own.

The ``mcp`` SDK's transports are anyio context managers: they must be entered and left in one
task, on one event loop. A runtime's loop comes and goes (``asyncio.run`` per test, a Lambda
invocation, an RQ work horse), and the tool list is read when the agent is built, before any
loop runs. So each process has one daemon thread with its own loop (:class:`_Loop`) that owns
every server connection; a tool call crosses to it with ``run_coroutine_threadsafe`` and its
cancellation (an abort, the tool's timeout) crosses back. A forked child (an RQ work horse)
starts with no thread and no connection: it opens its own on first use.

What a call's failure means is decided here, once, by when it happened:

- before the request was sent (connect, initialize, the tool's listing): nothing happened,
  :class:`~fxdurable.errors.MCPConnectError` / :class:`~fxdurable.errors.MCPToolChangedError`;
- after it was sent and before an answer (the server died, the connection dropped, no answer
  within the call timeout): the effect may or may not have happened. A ``safe`` or
  ``idempotent`` call reconnects and runs again (an idempotent one with the same execution id
  in its ``_meta``); an ``unsafe`` one raises :class:`~fxdurable.errors.MCPServerLostError` /
  :class:`~fxdurable.errors.MCPTimeoutError`, which the turn records ``outcome_unknown``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from fxdurable.core.codec import dumps
from fxdurable.errors import (
    MCPConnectError,
    MCPServerLostError,
    MCPTimeoutError,
    MCPToolChangedError,
    MCPToolError,
)

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPTool

__all__ = ["Connection", "ServerSpec", "close_connections", "connection", "fingerprint"]

log = logging.getLogger("fxdurable.mcp")
T = TypeVar("T")

# JSON-RPC codes the SDK raises as McpError for a connection's end and a read timeout.
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = 408
# How long a reconnect after a lost call waits before each new try (doubling to the cap).
_BACKOFF_S, _BACKOFF_MAX_S = 0.1, 1.0
# How often a call in flight over HTTP checks that its server is still there.
_PING_EVERY_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    """How to reach one server: a command over stdio, or a URL over streamable HTTP."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout_s: float = 10.0
    call_timeout_s: float = 60.0


def fingerprint(tool: MCPTool) -> str:
    """What a call depends on: the tool's input schema (canonical JSON)."""
    return dumps(tool.inputSchema)


class _Loop:
    """The process's MCP thread and its event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fxdurable-mcp")
        self.thread.daemon = True  # the servers' connections die with the process
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """From outside the thread, blocking: listing tools while an agent is built."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """From a runtime's loop; cancelling the await cancels the call on the MCP thread."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))


_lock = threading.Lock()
_loop: _Loop | None = None
_connections: dict[ServerSpec, Connection] = {}


def _forget_after_fork() -> None:
    # The thread did not survive the fork, and the parent's pipes and sockets are not ours.
    global _loop, _lock
    _loop = None
    _connections.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def connection(spec: ServerSpec) -> Connection:
    """This process's connection to ``spec``'s server (opened on first use)."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = _Loop()
        found = _connections.get(spec)
        if found is None:
            found = _connections[spec] = Connection(spec, _loop)
        return found


def close_connections() -> None:
    """Close every MCP server connection of this process (stdio servers' processes end)."""
    with _lock:
        found = list(_connections.values())
        _connections.clear()
    for conn in found:
        conn.close()


class Connection:
    """One server's client session, reconnected after a failure."""

    def __init__(self, spec: ServerSpec, loop: _Loop) -> None:
        self.spec = spec
        self._loop = loop
        # Owned by the MCP thread's loop from here on.
        self._session: ClientSession | None = None
        self._close: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._tools: dict[str, MCPTool] | None = None
        self._connecting: asyncio.Lock | None = None

    # -- from outside ------------------------------------------------------------------------

    def list_tools(self) -> list[MCPTool]:
        """The server's tools, as this process's connection last listed them (blocking)."""
        spec = self.spec
        tools = self._loop.run(self._listed(), timeout=spec.connect_timeout_s * 2 + 5)
        return list(tools.values())

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any],
        expected: str,
        rerun: bool,
    ) -> CallToolResult:
        """Call ``name`` on the MCP thread. ``expected``: the fingerprint the agent's tool was
        built from. ``rerun``: a lost call may run again (a safe or idempotent tool)."""
        return await self._loop.arun(self._call(name, arguments, meta, expected, rerun))

    def close(self) -> None:
        """End the connection (a stdio server's process with it)."""
        self._loop.run(self._disconnect(), timeout=10)

    # -- on the MCP thread -------------------------------------------------------------------

    async def _listed(self) -> dict[str, MCPTool]:
        await self._connected()
        assert self._tools is not None
        return self._tools

    async def _call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any], expected: str, rerun: bool
    ) -> CallToolResult:
        from mcp import McpError

        spec = self.spec
        while True:
            session = await self._connected()
            if not rerun:
                # An unsafe call goes out only on a connection that answered a moment ago: a
                # server that died while idle is found here, before anything was sent, and
                # the call reconnects instead of ending unknown.
                try:
                    async with asyncio.timeout(spec.connect_timeout_s):
                        await session.send_ping()
                except Exception:
                    await self._drop(session)
                    session = await self._connected()
            offered = (self._tools or {}).get(name)
            if offered is None or fingerprint(offered) != expected:
                what = "no longer offers" if offered is None else "changed the input schema of"
                raise MCPToolChangedError(
                    f"the MCP server {spec.name!r} {what} the tool {name!r} since this agent "
                    "was built; the call was not sent (restart the worker to take the new list)"
                )
            try:
                return await self._send(session, name, arguments, meta)
            except McpError as exc:
                code, message = exc.error.code, exc.error.message
                if code == _REQUEST_TIMEOUT:
                    # The server may still be working on it: never sent again.
                    raise MCPTimeoutError(
                        f"no answer from the MCP server {spec.name!r} within "
                        f"{spec.call_timeout_s:g}s"
                    ) from exc
                if code != _CONNECTION_CLOSED:
                    raise MCPToolError(f"the MCP server {spec.name!r} refused: {message}") from exc
                lost: BaseException = exc
            except Exception as exc:  # a transport's own error: a broken pipe, a reset socket
                lost = exc
            await self._drop(session)
            if not rerun:
                raise MCPServerLostError(
                    f"lost the MCP server {spec.name!r} mid-call ({type(lost).__name__}: {lost})"
                ) from lost
            log.warning(
                "MCP server %s lost mid-call of %s; reconnecting to run it again", spec.name, name
            )
            rerun = False  # once: a server that dies again settles the call by its policy

    async def _send(
        self, session: ClientSession, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> CallToolResult:
        """Send the call and wait for its answer. Over stdio a dead server's pipe closes and
        the SDK fails the call; over HTTP it does not (a dropped SSE stream leaves the request
        waiting for its timeout), so a call in flight pings the server every
        ``_PING_EVERY_S``: a ping that fails means the server (or its session) is gone."""
        spec = self.spec
        call = asyncio.ensure_future(
            session.call_tool(
                name,
                arguments,
                read_timeout_seconds=timedelta(seconds=spec.call_timeout_s),
                meta=meta,
            )
        )
        if spec.url is None:
            return await call
        holder = self._holder
        ping: asyncio.Future[Any] | None = None
        try:
            while True:
                watched: set[asyncio.Future[Any]] = {call} if holder is None else {call, holder}
                if ping is not None:
                    watched.add(ping)
                done, _ = await asyncio.wait(
                    watched,
                    timeout=spec.connect_timeout_s if ping is not None else _PING_EVERY_S,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if call in done:
                    return call.result()
                if holder is None or holder in done:
                    # The transport's task group failed (a ping's POST found nobody there).
                    raise ConnectionError("the connection to the server ended")
                if ping is None:
                    ping = asyncio.ensure_future(session.send_ping())
                elif ping in done and ping.exception() is None:
                    ping = None  # answered: the server is there; wait for the call again
                else:
                    failure = ping.exception() if ping in done else TimeoutError()
                    raise ConnectionError(f"the server stopped answering pings ({failure!r})")
        finally:
            call.cancel()  # no-ops once they are done
            if ping is not None:
                ping.cancel()

    async def _connected(self) -> ClientSession:
        """The live session, connecting (with retries until the connect timeout) if needed."""
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._session is not None and self._holder is not None and not self._holder.done():
                return self._session
            await self._disconnect()
            deadline = time.monotonic() + self.spec.connect_timeout_s
            delay, last = _BACKOFF_S, "no attempt"
            while True:
                try:
                    async with asyncio.timeout(max(0.05, deadline - time.monotonic())):
                        return await self._open()
                except Exception as exc:  # includes the timeout: try again until the deadline
                    last = f"{type(exc).__name__}: {exc}"
                    await self._disconnect()
                if time.monotonic() + delay >= deadline:
                    raise MCPConnectError(
                        f"could not connect to the MCP server {self.spec.name!r} within "
                        f"{self.spec.connect_timeout_s:g}s ({last})"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)

    async def _open(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._close = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(ready, self._close))
        session = await ready
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        cursor = listed.nextCursor
        while cursor:
            page = await session.list_tools(cursor=cursor)
            tools.update((t.name, t) for t in page.tools)
            cursor = page.nextCursor
        self._session, self._tools = session, tools
        return session

    async def _hold(self, ready: asyncio.Future[ClientSession], close: asyncio.Event) -> None:
        """Enter the transport and the session, hand the session over, wait to be closed, and
        leave them in this same task (anyio's rule)."""
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result(session)
                await close.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(exc))
            if not isinstance(exc, Exception):
                raise
            log.info("MCP server %s connection ended: %s", self.spec.name, exc)

    def _transport(self) -> Any:
        spec = self.spec
        if spec.url is not None:
            return _http_streams(spec)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert spec.command is not None
        params = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            env=dict(spec.env) if spec.env is not None else None,
            cwd=spec.cwd,
        )
        return stdio_client(params)

    async def _drop(self, session: ClientSession) -> None:
        """Disconnect after ``session`` failed, unless a sibling call already reconnected."""
        if self._session is session:
            await self._disconnect()

    async def _disconnect(self) -> None:
        holder, close = self._holder, self._close
        self._session = self._holder = self._close = None
        if holder is None or close is None:
            return
        close.set()
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(holder)
        except (TimeoutError, Exception):
            holder.cancel()


@asynccontextmanager
async def _http_streams(spec: ServerSpec) -> AsyncIterator[tuple[Any, Any]]:
    """A streamable-HTTP connection's (read, write) streams, what the session needs (the
    transport also yields its session id). Through the SDK's ``streamable_http_client``
    with an httpx client of our own: its older ``streamablehttp_client`` is deprecated and
    warns on every connection."""
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx.Timeout(
        spec.connect_timeout_s, read=spec.call_timeout_s + spec.connect_timeout_s
    )
    async with (
        # What the SDK's own client factory builds: its timeouts and headers, nothing else.
        httpx.AsyncClient(headers=dict(spec.headers) or None, timeout=timeout) as client,
        streamable_http_client(spec.url or "", http_client=client) as (read, write, _),
    ):
        yield read, write
