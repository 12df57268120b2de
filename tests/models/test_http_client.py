"""The HTTP crossing over real sockets (a tiny in-loop server), and the shared client's life."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest
from models_support import FakeProvider, Reply, collect, elapsed, request, run
from provider_fixtures import OPENAI_TEXT, first_events

from fxdurable.errors import ModelRetryableError
from fxdurable.runtime.models import OpenAIModel, Timeouts, aclose_clients
from fxdurable.runtime.models.http import shared_client

Script = Callable[[asyncio.StreamWriter], Awaitable[None]]

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(data: str) -> bytes:
    raw = data.encode()
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


async def serve(script: Script) -> tuple[asyncio.Server, str, list[asyncio.StreamWriter]]:
    """A server that reads one request and answers it with ``script``."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            await script(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1", writers


async def against(script: Script, **model_kwargs):
    server, url, writers = await serve(script)
    try:
        model = OpenAIModel("m", base_url=url, **model_kwargs)
        return await collect(model, request())
    finally:
        await aclose_clients()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


def hang_forever() -> Awaitable[None]:
    return asyncio.Event().wait()


def test_real_socket_stream_left_open_after_finish():
    async def script(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunked(first_events(OPENAI_TEXT, 5)))
        await writer.drain()
        await hang_forever()

    (result, took) = elapsed(lambda: run(against(script, finish_grace_s=0.2)))
    _, response = result
    assert response.text == "Hello, wörld!"
    assert 0.15 < took < 2.0


def test_real_socket_one_byte_writes():
    async def script(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for byte in OPENAI_TEXT.encode():
            writer.write(b"1\r\n" + bytes([byte]) + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    _, response = run(against(script))
    assert response.text == "Hello, wörld!"
    assert response.usage.output_tokens == 4


def test_real_socket_cut_before_finish_is_retryable():
    async def script(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunked(first_events(OPENAI_TEXT, 3)))
        await writer.drain()
        writer.transport.abort()

    with pytest.raises(ModelRetryableError):
        run(against(script))


def test_read_timeout_is_retryable():
    async def script(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        await writer.drain()
        await hang_forever()

    with pytest.raises(ModelRetryableError, match="read timeout"):
        run(against(script, timeout=Timeouts(read=0.2)))


def test_total_deadline_bounds_a_trickling_stream():
    async def script(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        while True:  # a keep-alive comment every 20 ms: never a read timeout
            writer.write(chunked(": keep-alive\n\n"))
            await writer.drain()
            await asyncio.sleep(0.02)

    def attempt() -> None:
        with pytest.raises(ModelRetryableError, match=r"total timeout of 0\.3s"):
            run(against(script, timeout=Timeouts(read=5, total=0.3)))

    _, took = elapsed(attempt)
    assert took < 2.0


def test_connection_refused_is_retryable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", timeout=Timeouts(connect=1))
    with pytest.raises(ModelRetryableError, match="could not connect"):
        run(collect(model, request()))


def test_status_error_over_a_real_socket_with_retry_after():
    async def script(writer: asyncio.StreamWriter) -> None:
        body = b'{"error": {"message": "slow down", "type": "rate_limit_error"}}'
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
            b"retry-after: 2\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()

    with pytest.raises(ModelRetryableError, match="slow down") as info:
        run(against(script))
    assert info.value.retry_after_s == 2.0


def test_one_client_per_loop_recreated_when_the_loop_changes():
    provider = FakeProvider(Reply(OPENAI_TEXT))
    model = OpenAIModel("m", base_url="http://llm.test", transport=provider.transport)

    async def once():
        await collect(model, request())
        return shared_client(provider.transport)

    # no aclose_clients between runs: the second loop must not reuse the first loop's client
    first = asyncio.run(once())
    second = run(once())
    assert first is not second
    assert second.is_closed  # run() closed it
    assert len(provider.requests) == 2


def test_clients_are_shared_within_a_loop_and_closed_by_aclose_clients():
    async def main():
        a = shared_client()
        b = shared_client()
        assert a is b
        await aclose_clients()
        assert a.is_closed
        c = shared_client()
        assert c is not a
        await aclose_clients()
        await aclose_clients()  # twice is fine

    asyncio.run(main())
