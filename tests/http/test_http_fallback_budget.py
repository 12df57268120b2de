"""Over HTTP (``POST /chat``, the app in process): a turn's switch to its fallback model is a
``model.fallback`` line, and a spent budget ends the turn with a ``turn_end`` line whose
outcome is ``failed`` and whose error is ``budget_exhausted``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pydantic
from http_lines import chat_in_process

import fxdurable as fx
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
    store = f"sqlite:///{tmp_path}/http.db"
    lines = chat_in_process(agent, store, settings=SETTINGS, rng=random.Random(2))
    types = [line["type"] for line in lines]
    (switch,) = [line for line in lines if line["type"] == "model.fallback"]
    assert (switch["data"]["from_model"], switch["data"]["to_model"]) == ("primary", "backup")
    completed = [line for line in lines if line["type"] == "model.completed"]
    assert [line["data"]["model"] for line in completed] == ["backup", "backup"]  # 3, 6 tokens
    assert types[-1] == "turn_end"
    end = lines[-1]["data"]
    assert end["outcome"] == "failed" and end["error"]["code"] == "budget_exhausted"
    assert "turn_output_tokens=6" in end["error"]["message"]
