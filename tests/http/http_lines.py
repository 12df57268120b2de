"""Reading chat streams in the HTTP tests: one JSON object per line, each with its cursor.

Every line read here is validated against the published line schema (``fxdurable.http.lines``,
the OpenAPI ``Line``), so each HTTP test also checks that what the server sent is in the
vocabulary.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

import fxdurable as fx
from fxdurable.http import HttpSettings, create_app, dev_principal
from fxdurable.http.lines import line_adapter

Line = dict[str, Any]


def line_of(raw: str | bytes) -> Line:
    """One line, parsed; raises (pydantic ValidationError) if it is not in the vocabulary."""
    line_adapter().validate_json(raw)
    line: Line = json.loads(raw)
    return line


def lines_of(raws: Iterable[str], *, progress: bool = False) -> list[Line]:
    return [
        line for line in (line_of(raw) for raw in raws if raw) if progress or not _is_progress(line)
    ]


def parsed(response: httpx.Response, *, progress: bool = False) -> Iterator[Line]:
    """The stream's lines, each validated. ``progress`` lines (polled state, sent whenever a
    tool call in flight has reported progress: the story's deploy does) are validated and
    dropped unless asked for, so a test of the event sequence sees only that."""
    lines = (line_of(raw) for raw in response.iter_lines() if raw)
    return (line for line in lines if progress or not _is_progress(line))


def _is_progress(line: Line) -> bool:
    return line["type"] == "progress"


def take_until(lines: Iterator[Line], stop: Callable[[Line], bool]) -> list[Line]:
    taken = []
    for line in lines:
        taken.append(line)
        if stop(line):
            return taken
    raise AssertionError(f"the stream closed before the expected line; got {taken}")


def is_turn_end(line: Line) -> bool:
    return line["type"] == "turn_end"


def tool_started(tool: str) -> Callable[[Line], bool]:
    return lambda line: line["type"] == "tool.started" and line["data"]["tool"] == tool


def chat_in_process(
    agent: fx.Agent, store: str, prompt: str = "go", *, session_id: str = "s", **runtime: Any
) -> list[Line]:
    """``POST /chat`` of ``prompt`` to the app over a runtime of ``agent`` (``runtime``: its
    other options), in this process through httpx's ASGI transport (no server, no port): the
    stream's lines to the turn's end, each validated, ``progress`` lines dropped."""

    async def go() -> list[Line]:
        async with fx.Runtime([agent], store=store, **runtime) as rt:
            settings = HttpSettings(dev=True)
            app = create_app(
                rt, authenticate=dev_principal, settings=settings, manage_runtime=False
            )
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                body = {"sessionId": session_id, "prompt": prompt}
                reply = await client.post("/chat", json=body)
                assert reply.status_code == 200, reply.text
                return lines_of(reply.text.splitlines())

    return asyncio.run(asyncio.wait_for(go(), 30))
