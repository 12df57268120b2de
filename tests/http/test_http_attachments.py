"""Images over HTTP (docs/attachments.md): ``POST /chat`` takes them as base64 or an https
URL, the model reads the bytes, the stream and ``GET /sessions/{id}/history`` show only refs,
and a bad one is a 422 problem with nothing written (in process, over ASGI)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx

import fxdurable as fx
from fxdurable.http import BearerTokens, HttpSettings, create_app
from fxdurable.runtime.runtime import Runtime

TOKEN = "attachments-token-0123"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
ENCODED = base64.b64encode(PNG).decode()


def _post_all(tmp_path: Path, bodies: list[dict[str, Any]]):
    model = fx.ScriptedModel(lambda r: fx.reply("seen"))
    runtime = Runtime([fx.Agent("eye", model)], store=f"sqlite:///{tmp_path}/img.db")
    app = create_app(runtime, authenticate=BearerTokens({TOKEN: "alice"}), settings=HttpSettings())

    async def main() -> tuple[list[httpx.Response], httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                replies = [
                    await client.post("/chat", headers=HEADERS, json=b, timeout=20) for b in bodies
                ]
                history = await client.get("/sessions/i1/history", headers=HEADERS)
                return replies, history

    replies, history = asyncio.run(main())
    return model, replies, history


def test_an_image_posted_as_base64_reaches_the_model_and_history_shows_its_ref(tmp_path):
    body = {
        "prompt": "what is in it?",
        "sessionId": "i1",
        "attachments": [
            {"mediaType": "image/png", "data": ENCODED, "name": "a.png"},
            {"mediaType": "image/jpeg", "url": "https://example.com/b.jpg"},
        ],
    }
    model, (reply,), history = _post_all(tmp_path, [body])
    assert reply.status_code == 200, reply.text
    assert ENCODED[:40] not in reply.text  # the stream carries no bytes
    (request,) = model.requests
    assert [(a.data, a.url) for a in request.messages[-1].attachments] == [
        (PNG, None),
        (None, "https://example.com/b.jpg"),
    ]
    assert history.status_code == 200, history.text
    user = history.json()["messages"][0]
    assert user["attachments"] == [
        {
            "mediaType": "image/png",
            "digest": hashlib.sha256(PNG).hexdigest(),
            "url": None,
            "size": len(PNG),
            "name": "a.png",
        },
        {
            "mediaType": "image/jpeg",
            "digest": None,
            "url": "https://example.com/b.jpg",
            "size": 0,
            "name": None,
        },
    ]
    assert ENCODED[:40] not in history.text


def test_a_bad_attachment_is_a_422_problem_and_writes_nothing(tmp_path):
    bad = [
        {"mediaType": "image/jpeg", "data": ENCODED},  # PNG bytes said to be JPEG
        {"mediaType": "image/png", "data": "not base64!"},
        {"mediaType": "image/png", "url": "http://example.com/a.png"},
        {"mediaType": "text/html", "data": ENCODED},
    ]
    bodies = [{"prompt": "look", "sessionId": "i1", "attachments": [a]} for a in bad]
    model, replies, history = _post_all(tmp_path, bodies)
    assert [r.status_code for r in replies] == [422] * 4, [r.text for r in replies]
    assert {r.json()["code"] for r in replies} == {"invalid_attachment"}
    assert history.status_code == 404  # no session was started
    assert not model.requests
