"""Every line type the HTTP API sends is one the console knows (tests/console_js/render_types.mjs).

The vocabulary is fxdurable.http.lines.WIRE_PAYLOADS: a type added there and not rendered
by fxdurable/console/static/render.js would show as raw JSON (its fallback for a newer
server's types) and fail here. Each type is rendered twice: with a sample of every field of
its payload, and with no data at all (a renderer must not break on a missing field).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import types
import typing
from typing import Any

import pytest
from node_support import JS_TESTS, ROOT, node_or_skip

from fxdurable.http.lines import WIRE_PAYLOADS, Marker

SCRIPT = JS_TESTS / "render_types.mjs"


def _sample(annotation: Any) -> Any:
    """A value of ``annotation``'s type: enough for a renderer to show something."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)))
    if origin in (tuple, list):
        return [_sample(args[0])] if args else []
    if origin is dict or annotation is dict:
        return {"key": "value"}
    if dataclasses.is_dataclass(annotation):
        return {f.name: _sample(f.type) for f in dataclasses.fields(annotation)}
    return {str: "sample", int: 1, float: 1.5, bool: False}.get(annotation, "sample")


def _samples(empty: bool) -> dict[str, dict[str, Any]]:
    samples = {}
    for wire, payload in WIRE_PAYLOADS.items():
        hints = typing.get_type_hints(payload)
        samples[wire] = (
            {} if empty else {f.name: _sample(hints[f.name]) for f in dataclasses.fields(payload)}
        )
    return samples


def _render(samples: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    run = subprocess.run(
        [node_or_skip(), str(SCRIPT), json.dumps(samples)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rendered: dict[str, dict[str, Any]] = json.loads(run.stdout)
    return rendered


@pytest.mark.parametrize("empty", [False, True], ids=["sampled", "no-data"])
def test_every_line_type_is_rendered(empty: bool) -> None:
    rendered = _render(_samples(empty))
    markers = {m.value for m in Marker} - {Marker.TURN_START.value, Marker.TURN_END.value}
    assert set(rendered) == set(WIRE_PAYLOADS)
    for wire, result in rendered.items():
        if wire in markers:
            assert result == {"item": False}, wire  # stream markers are not history
            continue
        assert result["item"], wire
        assert result["kind"] == wire
        assert "ev-unknown" not in result["class"], f"{wire} is not rendered: {result['text']}"
        assert "undefined" not in result["text"], f"{wire}: {result['text']}"
