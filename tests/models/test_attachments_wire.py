"""Images and documents in the providers' requests (docs/providers.md, "Images and
documents, per provider"): the exact parts each wire sends for a prompt's PNG, a JPEG by URL,
a PDF and a tool's image; the scripted server reading them back to the same bytes through the
real httpx clients; the bytes of a request's prefix unchanged from one step to the next; and
a malformed image refused with the provider's 400."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from fxdurable.runtime.models.anthropic import build_anthropic_body
from fxdurable.runtime.models.base import (
    Attachment,
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
)
from fxdurable.runtime.models.caching import PromptCache
from fxdurable.runtime.models.openai import build_openai_body
from fxdurable.runtime.models.openai_responses import build_responses_body
from fxdurable.testing.model_server import ScriptedModelServer

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
PDF = b"%PDF-1.7\n" + bytes(range(200, 256))
TOOL_PNG = b"\x89PNG\r\n\x1a\n tool chart"
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
B64_TOOL = base64.b64encode(TOOL_PNG).decode()
PHOTO_URL = "https://example.com/photo.jpg"

PROMPT = ChatMessage(
    role="user",
    text="Compare these",
    attachments=(
        Attachment(media_type="image/png", data=PNG),
        Attachment(media_type="image/jpeg", url=PHOTO_URL),
        Attachment(media_type="application/pdf", data=PDF, name="report.pdf"),
    ),
)
CALL = ToolCallRequest(name="chart", arguments="{}", provider_id="call_1")
ASSISTANT = ChatMessage(role="assistant", text="", tool_calls=(CALL,))
RESULT = ChatMessage(
    role="tool",
    text="the chart",
    tool_call_id="call_1",
    tool_name="chart",
    attachments=(Attachment(media_type="image/png", data=TOOL_PNG),),
)
FIRST = ModelRequest(instructions="Be brief.", messages=[PROMPT])
SECOND = ModelRequest(instructions="Be brief.", messages=[PROMPT, ASSISTANT, RESULT])
WIRES = ("anthropic", "openai", "openai-responses")


def body_for(wire: str, request: ModelRequest) -> dict[str, Any]:
    if wire == "anthropic":
        return build_anthropic_body("claude-x", request, max_tokens=64, cache=PromptCache())
    if wire == "openai":
        return build_openai_body("gpt-x", request)
    return build_responses_body("gpt-x", request)


# -- the exact parts ---------------------------------------------------------------------


def test_anthropic_sends_image_and_document_blocks_and_a_tool_result_list() -> None:
    messages = body_for("anthropic", SECOND)["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
            },
            {"type": "image", "source": {"type": "url", "url": PHOTO_URL}},
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
                "title": "report.pdf",
            },
        ],
    }
    # The latest message's breakpoint goes on its last block, the tool_result (never inside
    # it, and never on an older message's image).
    assert messages[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": [
                    {"type": "text", "text": "the chart"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": B64_TOOL},
                    },
                ],
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }


def test_anthropic_marks_the_prompts_last_block_when_it_is_an_image() -> None:
    content = body_for("anthropic", FIRST)["messages"][-1]["content"]
    assert [("cache_control" in block) for block in content] == [False, False, False, True]


def test_chat_completions_sends_parts_and_the_tool_images_in_a_user_message() -> None:
    messages = body_for("openai", SECOND)["messages"]
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            {"type": "image_url", "image_url": {"url": PHOTO_URL}},
            {
                "type": "file",
                "file": {
                    "filename": "report.pdf",
                    "file_data": f"data:application/pdf;base64,{B64_PDF}",
                },
            },
        ],
    }
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "the chart"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by chart (call call_1):"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_TOOL}"}},
            ],
        },
    ]


def test_responses_sends_input_parts_and_a_function_call_output_list() -> None:
    items = body_for("openai-responses", SECOND)["input"]
    assert items[0] == {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Compare these"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{B64_PNG}"},
            {"type": "input_image", "image_url": PHOTO_URL},
            {
                "type": "input_file",
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{B64_PDF}",
            },
        ],
    }
    assert items[-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "the chart"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{B64_TOOL}"},
        ],
    }


def test_messages_without_attachments_are_sent_as_before() -> None:
    plain = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
    assert body_for("openai", plain)["messages"] == [{"role": "user", "content": "hi"}]
    assert body_for("openai-responses", plain)["input"][0]["content"] == "hi"
    anthropic = body_for("anthropic", plain)["messages"][0]["content"]
    assert anthropic == [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]


@pytest.mark.parametrize("wire", WIRES)
def test_the_first_requests_conversation_is_a_prefix_of_the_next(wire: str) -> None:
    # Same bytes, same base64, same key order: the next step repeats what the step before
    # sent (the Anthropic breakpoint, which moves to the newest message, aside).
    def conversation(request: ModelRequest) -> str:
        body = body_for(wire, request)
        key = "input" if wire == "openai-responses" else "messages"
        entries = body[key]
        if wire == "anthropic":
            entries = [
                {
                    **m,
                    "content": [
                        {k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]
                    ],
                }
                for m in entries
            ]
        text = json.dumps(entries, separators=(",", ":"))
        return text[:-1]  # without the closing bracket

    assert conversation(SECOND).startswith(conversation(FIRST))
    assert json.dumps(body_for(wire, SECOND)) == json.dumps(body_for(wire, SECOND))


# -- through the scripted server ---------------------------------------------------------


def model_for(wire: str, server: ScriptedModelServer) -> Any:
    if wire == "anthropic":
        return AnthropicModel("claude-x", base_url=server.url, api_key="k")
    model_type = OpenAIModel if wire == "openai" else OpenAIResponsesModel
    return model_type("gpt-x", base_url=server.openai_base_url, api_key="k")


async def call(model: Any, request: ModelRequest) -> ModelResponse:
    async for part in model.stream(request):
        if isinstance(part, Finish):
            return part.response
    raise AssertionError("no Finish")


@pytest.mark.parametrize("wire", WIRES)
def test_the_server_reads_back_the_same_bytes(wire: str) -> None:
    with ScriptedModelServer([ModelResponse(text="ok")]) as server:
        asyncio.run(call(model_for(wire, server), SECOND))
    assert [r.status for r in server.requests] == [200], [r.error for r in server.requests]
    parsed = server.requests[0].request
    assert parsed is not None
    prompt = next(m for m in parsed.messages if m.role == "user")
    assert prompt.text == "Compare these"
    assert [(a.media_type, a.data, a.url) for a in prompt.attachments] == [
        ("image/png", PNG, None),
        ("image/jpeg", None, PHOTO_URL),
        ("application/pdf", PDF, None),
    ]
    assert prompt.attachments[2].name == "report.pdf"
    got = [a.data for m in parsed.messages for a in m.attachments if m is not prompt]
    assert got == [TOOL_PNG]  # the tool's image (after its tool message on chat completions)


PATHS = {
    "anthropic": "/v1/messages",
    "openai": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}


def with_image(wire: str, body: dict[str, Any], media_type: str, data: str) -> dict[str, Any]:
    """``body`` (a copy) with its prompt's first image replaced by ``data`` as ``media_type``."""
    body = json.loads(json.dumps(body))
    if wire == "anthropic":
        source = {"type": "base64", "media_type": media_type, "data": data}
        body["messages"][0]["content"][1]["source"] = source
    elif wire == "openai":
        body["messages"][-1]["content"][1]["image_url"]["url"] = f"data:{media_type};base64,{data}"
    else:
        body["input"][0]["content"][1]["image_url"] = f"data:{media_type};base64,{data}"
    return body


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    ("media_type", "data", "reason"),
    [("image/png", "iVBORw0K!!!!", "base64"), ("image/bmp", B64_PNG, "media type")],
)
def test_the_server_refuses_a_malformed_image_with_a_400(
    wire: str, media_type: str, data: str, reason: str
) -> None:
    body = body_for(wire, FIRST)
    with ScriptedModelServer(lambda _request: ModelResponse(text="ok")) as server:
        url = server.url.rstrip("/") + PATHS[wire]
        control = httpx.post(url, json=with_image(wire, body, "image/png", B64_PNG), timeout=10)
        refused = httpx.post(url, json=with_image(wire, body, media_type, data), timeout=10)
    assert control.status_code == 200  # the negative control: a good image is read
    assert refused.status_code == 400
    assert reason in (server.requests[1].error or "")
