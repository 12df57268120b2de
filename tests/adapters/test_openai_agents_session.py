"""``DurableSession``: a durable session driven by the OpenAI Agents adapter, read as an SDK
``Session``. Its items are the journal's conversation (after a reopen of the store, as another
worker would read it), the SDK's own ``Runner`` accepts them as input, and the writes are
refused with an error a caller can catch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

import fxdurable as fx
from fxdurable.adapters.openai_agents import (
    DurableSession,
    SessionReadOnlyError,
    durable_agent,
    replay,
)

DEPLOYED: list[str] = []


@replay("safe")
@function_tool
def read_status(region: str) -> str:
    """Read a region's status."""
    return f"{region}: healthy"


@function_tool
def deploy(release: str) -> str:
    """Deploy a release."""
    DEPLOYED.append(release)
    return f"{release} deployed"


def ops_agent() -> fx.Agent:
    model = ScriptedModel(
        [
            [function_call("read_status", {"region": "eu"}, call_id="c1")],
            [function_call("deploy", {"release": "r1"}, call_id="c2")],
            [assistant_message("Deployed r1.")],
        ]
    )
    return durable_agent(Agent(name="ops", model=model, tools=[read_status, deploy]))


EXPECTED: list[dict[str, Any]] = [
    {"role": "user", "content": "Deploy r1."},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "read_status",
        "arguments": '{"region":"eu"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "eu: healthy"},
    {"type": "function_call", "call_id": "c2", "name": "deploy", "arguments": '{"release":"r1"}'},
    {"type": "function_call_output", "call_id": "c2", "output": "r1 deployed"},
    {"role": "assistant", "content": "Deployed r1."},
]


def test_a_durable_sessions_conversation_reads_as_sdk_items(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"

    async def first_worker() -> None:
        async with fx.Runtime([ops_agent()], store=store) as rt:
            assert await rt.session("ops-1").run("Deploy r1.") == "Deployed r1."

    async def read(limit: int | None) -> list[Any]:
        # Another process's view: a runtime of its own on the same store.
        async with fx.Runtime([ops_agent()], store=store) as rt:
            memory = DurableSession(rt.session("ops-1"))
            assert isinstance(memory, Session)  # the SDK's runtime-checkable protocol
            assert memory.session_id == "ops-1"
            return await memory.get_items(limit)

    asyncio.run(first_worker())
    assert DEPLOYED == ["r1"]
    items = asyncio.run(read(None))
    assert [_normal(i) for i in items] == EXPECTED
    assert [_normal(i) for i in asyncio.run(read(2))] == EXPECTED[-2:]
    assert asyncio.run(read(0)) == []

    # The SDK's own Runner takes them as the input of a run of an ordinary SDK agent.
    reviewer_model = ScriptedModel([[assistant_message("r1 is out.")]])
    reviewer = Agent(name="reviewer", model=reviewer_model)
    prompt = [*items, {"role": "user", "content": "Status?"}]
    quiet = RunConfig(tracing_disabled=True)
    result = asyncio.run(Runner.run(reviewer, prompt, run_config=quiet))
    assert result.final_output == "r1 is out."
    sent = reviewer_model.calls[0].input
    assert [_normal(i) for i in sent[: len(EXPECTED)]] == EXPECTED
    assert DEPLOYED == ["r1"]  # reading the memory ran nothing again


def test_a_session_that_does_not_exist_is_empty_and_writes_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with fx.Runtime([ops_agent()], store=f"sqlite:///{tmp_path}/s.db") as rt:
            memory = DurableSession(rt.session("nobody"))
            assert await memory.get_items() == []
            with pytest.raises(SessionReadOnlyError, match="written by its turns"):
                await memory.add_items([{"role": "user", "content": "hi"}])
            with pytest.raises(fx.ConfigurationError, match=r"pop_item"):
                await memory.pop_item()
            with pytest.raises(SessionReadOnlyError, match=r"clear_session"):
                await memory.clear_session()
            assert await memory.get_items() == []  # nothing was written
            assert await rt.session("nobody").events() == []

    asyncio.run(main())


def _normal(item: Any) -> dict[str, Any]:
    """An item as plain JSON (the SDK's Runner may hand back pydantic objects or extra keys)."""
    plain = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else dict(item)
    keys = (
        ("role", "content")
        if "role" in plain
        else ("type", "call_id", "name", "arguments", "output")
    )
    return {k: plain[k] for k in keys if k in plain}
