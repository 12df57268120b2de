"""Opt-in (``FXD_LIVE_TESTS=1``): one turn per provider against its real API, with a tool call
in the middle, so that the follow-up request after the tool result (the one reasoning models
refuse when their reasoning is not carried back) is checked by the provider itself. Costs a
few cents of tokens.

Each provider runs when its key is set, on a model named by an environment variable (a
reasoning model by default):

- ``openai/…`` (Chat Completions): ``OPENAI_API_KEY`` (``OPENAI_BASE_URL`` honoured), the
  model ``$FXD_LIVE_OPENAI_MODEL`` (default ``gpt-5-mini``);
- ``openai-responses/…``: ``OPENAI_API_KEY``, ``$FXD_LIVE_RESPONSES_MODEL`` (``gpt-5-mini``);
- ``anthropic/…``: ``ANTHROPIC_API_KEY``, ``$FXD_LIVE_ANTHROPIC_MODEL`` (``claude-sonnet-4-5``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pydantic
import pytest

import fxdurable as fx
from fxdurable.backends import open_store
from fxdurable.runtime.models import AnthropicModel, OpenAIResponsesModel

LIVE_TIMEOUT_S = 180

PROVIDERS = [
    pytest.param("openai", "OPENAI_API_KEY", "FXD_LIVE_OPENAI_MODEL", "gpt-5-mini", id="openai"),
    pytest.param(
        "openai-responses",
        "OPENAI_API_KEY",
        "FXD_LIVE_RESPONSES_MODEL",
        "gpt-5-mini",
        id="openai-responses",
    ),
    pytest.param(
        "anthropic",
        "ANTHROPIC_API_KEY",
        "FXD_LIVE_ANTHROPIC_MODEL",
        "claude-sonnet-4-5",
        id="anthropic",
    ),
]


class Pair(pydantic.BaseModel):
    a: int
    b: int


@fx.tool(replay="safe")
def multiply(inp: Pair) -> str:
    """Multiply two integers exactly. Always use this tool for multiplication."""
    return str(inp.a * inp.b)


@pytest.mark.parametrize(("prefix", "key", "model_env", "default"), PROVIDERS)
def test_one_turn_with_a_tool_call_on_the_real_api(
    prefix: str, key: str, model_env: str, default: str, tmp_path: Path
) -> None:
    if not os.environ.get(key):
        pytest.skip(f"{key} is not set: the {prefix} live test needs it")
    name = os.environ.get(model_env) or default
    # Reasoning on where it is asked for, so the follow-up must carry it back.
    model: Any = f"{prefix}/{name}"
    if prefix == "anthropic":
        thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
        model = AnthropicModel(name, max_tokens=4096, extra_body=thinking)
    elif prefix == "openai-responses":
        model = OpenAIResponsesModel(name, extra_body={"reasoning": {"summary": "auto"}})
    agent = fx.Agent(
        "live",
        model,
        instructions="You answer arithmetic questions. Use the multiply tool; never guess.",
        tools=[multiply],
    )
    url = f"sqlite:///{tmp_path}/live.db"

    async def turn() -> str:
        async with fx.Runtime([agent], store=url) as rt:
            session = rt.session("live-1")
            return await session.run("What is 1234 times 5678? Answer with the number only.")

    answer = asyncio.run(asyncio.wait_for(turn(), LIVE_TIMEOUT_S))
    assert "7006652" in answer.replace(",", "").replace(" ", ""), answer
    store = open_store(url)
    try:
        calls = store.read(lambda v: v.session_tool_tasks("live-1"))
    finally:
        store.close()
    assert [c.tool for c in calls] >= ["multiply"], calls  # the follow-up request was accepted
    assert all(c.status == "completed" for c in calls), calls
