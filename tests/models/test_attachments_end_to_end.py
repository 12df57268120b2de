"""Images end to end: a prompt's image and a tool's image go from ``session.run`` through the
journal and the blobs to the provider's request, on all three wires, through the real httpx
client against the scripted server, which reads them back from the wire (imgcore's records
meeting imgwire's request bodies)."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from provider_e2e_support import fresh_store, run, runtime
from test_extra_body import model_for

import fxdurable as fx
from fxdurable.runtime.attachments import attachment_from_bytes
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.testing.model_server import ScriptedModelServer

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256))
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(200))


class Plot(pydantic.BaseModel):
    name: str


@fx.tool(name="plot")
def plot(inp: Plot) -> fx.ToolResult:
    """Draw a plot."""
    return fx.ToolResult(f"plotted {inp.name}", attachments=[attachment_from_bytes(JPEG)])


def look_then_answer(request: ModelRequest) -> ModelResponse:
    # Chat completions send a tool's images as a user message after the tool messages.
    if any(m.role == "tool" for m in request.messages):
        return ModelResponse(text="Both seen.")
    call = fx.ToolCallRequest(name="plot", arguments=json.dumps({"name": "sales"}))
    return ModelResponse(text="Plotting.", tool_calls=(call,))


@pytest.mark.parametrize("wire", ["anthropic", "openai", "openai-responses"])
def test_a_prompt_image_and_a_tool_image_reach_the_provider(tmp_path: Path, wire: str) -> None:
    with ScriptedModelServer(look_then_answer) as server:
        agent = fx.Agent("a", model_for(wire, server, {}), tools=[plot])
        store = fresh_store(tmp_path)

        async def go() -> str:
            async with runtime(tmp_path, [agent], store=store) as rt:
                image = attachment_from_bytes(PNG, name="chart.png")
                return await rt.session("img").run("What is this?", attachments=[image], timeout=8)

        assert run(go(), timeout=20) == "Both seen."
    assert [r.status for r in server.requests] == [200, 200], [r.error for r in server.requests]
    first, follow = (r.request for r in server.requests)
    assert first is not None and follow is not None
    sent = [a.data for m in first.messages for a in m.attachments]
    assert sent == [PNG]  # the prompt's bytes, loaded from the blob
    sent = [a.data for m in follow.messages for a in m.attachments]
    assert sent == [PNG, JPEG]  # and the tool's, beside its result, on the next request
    assert b"plotted sales" in server.requests[1].raw
