"""A typed agent over HTTP: ``turn_end`` carries the validated answer as JSON, the
``output.rejected`` line says why an answer was sent back, and ``GET /sessions/{id}`` shows
the output with the submission (in process, over ASGI)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pydantic
from http_lines import lines_of

import fxdurable as fx
from fxdurable.http import BearerTokens, HttpSettings, create_app
from fxdurable.runtime.models.base import REJECTED_ANSWER_HEADING, ModelRequest, ModelResponse
from fxdurable.runtime.runtime import Runtime

TOKEN = "typed-output-token-0123"


class Rating(pydantic.BaseModel):
    score: int
    reason: str


def policy(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].text.startswith(REJECTED_ANSWER_HEADING):
        return fx.reply('{"score": 4, "reason": "late"}')
    return fx.reply('{"score": 4}')


def test_turn_end_carries_the_typed_answer_as_json(tmp_path: Path) -> None:
    agent = fx.Agent("rater", fx.ScriptedModel(policy), output_type=Rating)
    runtime = Runtime([agent], store=f"sqlite:///{tmp_path}/typed.db")
    app = create_app(runtime, authenticate=BearerTokens({TOKEN: "alice"}), settings=HttpSettings())
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                response = await client.post(
                    "/chat",
                    headers=headers,
                    json={"prompt": "rate it", "sessionId": "r1"},
                    timeout=20,
                )
                assert response.status_code == 200, response.text
                session = await client.get("/sessions/r1", headers=headers)
                assert session.status_code == 200, session.text
                return lines_of(response.text.splitlines()), session.json()

    lines, session = asyncio.run(main())
    (rejected,) = [line for line in lines if line["type"] == "output.rejected"]
    assert "reason: Field required" in rejected["data"]["message"]
    end = lines[-1]
    assert end["type"] == "turn_end" and end["data"]["outcome"] == "completed", end
    assert end["data"]["output"] == {"score": 4, "reason": "late"}
    (submission,) = session["submissions"]
    assert submission["output"] == {"score": 4, "reason": "late"}
