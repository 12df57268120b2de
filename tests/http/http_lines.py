"""Reading chat streams in the HTTP tests: one JSON object per line, each with its cursor."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx

Line = dict[str, Any]


def parsed(response: httpx.Response) -> Iterator[Line]:
    return (json.loads(raw) for raw in response.iter_lines() if raw)


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
