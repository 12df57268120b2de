"""``StoreSession``: the SDK's own ``Runner.run(..., session=)`` keeps its history in
fxdurable's store. A second run after a restart (another Runtime on the same store file) sends
the model the first run's items; pop and clear commit; every write is a ``state.changed``
event of the journal (so ``fxdurable check`` folds it), and a durable agent's session is never
written by it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message

import fxdurable as fx
from fxdurable.adapters.openai_agents import StoreSession
from fxdurable.backends import open_store
from fxdurable.testing import check_store
from tests.adapters.test_openai_agents_session import ops_agent

QUIET = RunConfig(tracing_disabled=True)


def texts(items: list[Any]) -> list[tuple[str, str]]:
    found = []
    for item in items:
        content = item["content"]
        if isinstance(content, list):  # an assistant output message: its text parts
            content = "".join(part["text"] for part in content)
        found.append((item["role"], content))
    return found


def test_the_runners_history_survives_a_restart_and_pop_and_clear_commit(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"

    async def run(prompt: str, answer: str) -> ScriptedModel:
        model = ScriptedModel([[assistant_message(answer)]])
        async with fx.Runtime([ops_agent()], store=store) as rt:  # a fresh runtime each time
            memory = StoreSession(rt, "chat-1")
            assert isinstance(memory, Session)
            result = await Runner.run(
                Agent(name="chat", model=model), prompt, session=memory, run_config=QUIET
            )
            assert result.final_output == answer
        return model

    asyncio.run(run("My name is Ada.", "Hello Ada."))
    second = asyncio.run(run("What is my name?", "Ada."))
    assert texts(list(second.calls[0].input)) == [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]

    async def edit() -> None:
        async with fx.Runtime([ops_agent()], store=store) as rt:
            memory = StoreSession(rt, "chat-1")
            assert len(await memory.get_items()) == 4
            assert texts(await memory.get_items(1)) == [("assistant", "Ada.")]
            popped = await memory.pop_item()
            assert popped is not None and texts([popped]) == [("assistant", "Ada.")]
            assert texts(await memory.get_items(1)) == [("user", "What is my name?")]
            await memory.add_items([{"role": "user", "content": "again"}])
            assert len(await memory.get_items()) == 4
            await memory.clear_session()
            assert await memory.get_items() == [] and await memory.pop_item() is None
            changes = [e for e in await rt.session("chat-1").events() if e.type == "state.changed"]
            # two runs (the input, then the output: 2 writes each), the pop, the add, the clear
            assert len(changes) == 7, changes

    asyncio.run(edit())
    opened = open_store(store)
    try:
        summary = opened.read(lambda v: check_store(v, now=time.time(), at_rest=True))
    finally:
        opened.close()
    assert not summary.violations, summary.violations


def test_a_durable_agents_session_is_not_written_and_nothing_is_made_by_reads(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with fx.Runtime([ops_agent()], store=f"sqlite:///{tmp_path}/s.db") as rt:
            assert await rt.session("ops-1").run("Deploy r1.") == "Deployed r1."
            before = len(await rt.session("ops-1").events())
            theirs = StoreSession(rt, "ops-1")
            with pytest.raises(fx.AgentMismatchError, match="ops"):
                await theirs.add_items([{"role": "user", "content": "hi"}])
            with pytest.raises(fx.AgentMismatchError):
                await theirs.get_items()
            assert len(await rt.session("ops-1").events()) == before
            empty = StoreSession(rt, "nobody")
            assert await empty.get_items() == [] and await empty.pop_item() is None
            await empty.clear_session()
            assert await rt.session("nobody").events() == []  # nothing was made
            big = StoreSession(rt, "big")  # past the state's bound: refused, nothing written
            with pytest.raises(fx.StateTooLargeError):
                await big.add_items([{"role": "user", "content": "x" * 70_000}])
            assert await big.get_items() == [] and await rt.session("big").events() == []

    asyncio.run(main())
