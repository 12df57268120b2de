"""Over HTTP (``POST /chat``, the app in process): a turn's switch to its fallback model is a
``model.fallback`` line, and a spent budget ends the turn with a ``turn_end`` line whose
outcome is ``failed`` and whose error is ``budget_exhausted``."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pydantic

import fxdurable as fx
from fxdurable.http import HttpSettings, create_app, dev_principal
from fxdurable.runtime.models.base import Finish, ModelRequest, TextDelta

SETTINGS = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)


class Note(pydantic.BaseModel):
    text: str


@fx.tool(replay="safe")
def note(args: Note) -> str:
    return "noted"


class Overloaded:
    @property
    def name(self) -> str:
        return "primary"

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | Finish]:
        raise fx.ModelOverloadedError("primary is overloaded (HTTP 529)")
        yield  # pragma: no cover - makes this an async generator


def chat_lines(tmp_path: Path, agent: fx.Agent) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        store = f"sqlite:///{tmp_path}/http.db"
        async with fx.Runtime([agent], store=store, settings=SETTINGS, rng=random.Random(2)) as rt:
            app = create_app(
                rt,
                authenticate=dev_principal,
                settings=HttpSettings(dev=True),
                manage_runtime=False,
            )
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                reply = await client.post("/chat", json={"sessionId": "s", "prompt": "go"})
                assert reply.status_code == 200, reply.text
                return [json.loads(line) for line in reply.text.splitlines() if line]

    return asyncio.run(asyncio.wait_for(go(), 30))


def test_a_looping_backup_shows_its_switch_and_stops_at_the_budget(tmp_path: Path) -> None:
    looper = fx.ScriptedModel(
        lambda request: fx.reply("once more", fx.call("note", text="x")), name="backup"
    )
    agent = fx.Agent(
        "a",
        [Overloaded(), looper],
        tools=[note],
        spending=fx.SpendingBudget(turn_output_tokens=6),
    )
    lines = chat_lines(tmp_path, agent)
    types = [line["type"] for line in lines]
    (switch,) = [line for line in lines if line["type"] == "model.fallback"]
    assert (switch["data"]["from_model"], switch["data"]["to_model"]) == ("primary", "backup")
    completed = [line for line in lines if line["type"] == "model.completed"]
    assert [line["data"]["model"] for line in completed] == ["backup", "backup"]  # 3, 6 tokens
    assert types[-1] == "turn_end"
    end = lines[-1]["data"]
    assert end["outcome"] == "failed" and end["error"]["code"] == "budget_exhausted"
    assert "turn_output_tokens=6" in end["error"]["message"]
