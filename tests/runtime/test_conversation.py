"""The conversation a worker holds in memory is exactly what the records say the model is sent.

Each model request is compared, while the model is being called, with :func:`build_history` of
every message and tool task of the session read afresh: a held conversation that missed a
write (another worker's turn, a steering message, a summary) would differ.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pydantic
from fxrt_support import FAST, fresh_store, run

import fxdurable as fx
from fxdurable.core.records import MessageRecord
from fxdurable.core.store import ReadView, Store
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.history import build_history, with_summary
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import turn_messages
from fxdurable.runtime.tools import define_tool


class KeyInput(pydantic.BaseModel):
    key: str


async def _lookup(inp: KeyInput, ctx: fx.ToolContext) -> str:
    return f"{inp.key} = 42"


def _checking_agent(store: Store, mismatches: list[str]) -> fx.Agent:
    """An agent whose model checks every request against the records read in full."""

    def policy(request: ModelRequest) -> ModelResponse:
        def full(view):  # type: ignore[no-untyped-def]
            session = view.get_session("s")
            history = build_history(view.messages("s"), view.session_tool_tasks("s"))
            return history, session.steering

        history, steering = store.read(full)
        expected = [*history.messages, *(fx.ChatMessage(role="user", text=t) for t in steering)]
        if list(request.messages) != expected or request.instructions != with_summary(
            "", history.summary
        ):
            mismatches.append(f"request {len(mismatches)} differs from the records")
        done = sum(1 for m in turn_messages(request) if m.role == "assistant")
        if done == 0:
            return fx.reply("Looking.", fx.call("lookup", key="a"), fx.call("lookup", key="b"))
        return fx.reply("Both are 42.")

    lookup = define_tool("lookup", description="Look up.", input_model=KeyInput, execute=_lookup)
    return fx.Agent("a", fx.ScriptedModel(policy), tools=[lookup], instructions="")


def test_held_conversation_matches_the_records_across_runtimes(tmp_path: Path) -> None:
    mismatches: list[str] = []

    async def go() -> None:
        store = fresh_store(tmp_path)
        agent = _checking_agent(store, mismatches)
        first = fx.Runtime([agent], store=store, settings=FAST, concurrency=1)
        second = fx.Runtime([agent], store=store, settings=FAST, concurrency=1)
        async with first, second:
            for n in range(2):
                assert await first.session("s").run(f"one {n}", timeout=10) == "Both are 42."
            # Another worker writes turns this one has not seen: its held copy must not serve.
            assert await second.session("s").run("two", timeout=10) == "Both are 42."
            assert await first.session("s").run("three", timeout=10) == "Both are 42."
            assert await second.session("s").run("four", timeout=10) == "Both are 42."
            await asyncio.sleep(0)

    run(go())
    assert mismatches == []


def test_a_claim_by_anyone_else_in_between_reloads_the_held_conversation(tmp_path: Path) -> None:
    """Settled tasks can change under a held conversation only by another owner (a refresh
    of a ``reuse=False`` read): a lease token that skipped one of ours means reload."""
    store = fresh_store(tmp_path)
    agent = _checking_agent(store, [])

    async def go() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST, concurrency=1) as rt:
            assert await rt.session("s").run("one", timeout=10) == "Both are 42."

    run(go(), timeout=20)
    store = fresh_store(tmp_path)
    cache = ConversationCache()

    def results(token: int) -> list[str]:
        def body(view):  # type: ignore[no-untyped-def]
            session = view.get_session("s")
            history = cache.conversation(view, session, token).history()
            return [m.text for m in history.messages if m.role == "tool"]

        return store.read(body)

    assert results(7) == ["a = 42", "b = 42"]

    def rewrite(tx):  # type: ignore[no-untyped-def]
        task = tx.tool_tasks(tx.submissions("s")[0].id)[0]
        tx.put_tool_task(
            replace(task, result="a = 43", version=task.version + 1),
            expected_version=task.version,
        )
        session = tx.get_session("s")
        tx.put_session(
            replace(session, version=session.version + 1), expected_version=session.version
        )

    store.transact(rewrite)
    assert results(8) == ["a = 42", "b = 42"], "our own next claim: the held copy serves"
    assert results(10) == ["a = 43", "b = 42"], "someone else's claim in between: reloaded"
    assert len(cache) == 1


def test_a_cold_load_after_a_compaction_starts_at_the_summary(tmp_path: Path) -> None:
    from fxdurable.errors import ContextLengthError
    from fxdurable.runtime.model_step import SUMMARIZE_INSTRUCTIONS

    def policy(request: ModelRequest) -> ModelResponse:
        if request.instructions.startswith(SUMMARIZE_INSTRUCTIONS):
            return fx.reply("SUMMARY of the long questions")
        if sum(len(m.text) for m in request.messages) > 2_500:
            raise ContextLengthError("prompt is too long")
        if sum(1 for m in turn_messages(request) if m.role == "assistant") == 0:
            return fx.reply("Looking.", fx.call("lookup", key="a"))
        return fx.reply("answer")

    lookup = define_tool("lookup", description="Look up.", input_model=KeyInput, execute=_lookup)
    agent = fx.Agent("a", fx.ScriptedModel(policy), tools=[lookup], instructions="")
    store = fresh_store(tmp_path)

    async def go() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST, concurrency=1) as rt:
            for n in range(4):
                assert await rt.session("s").run(f"q{n} " + "x" * 1_000, timeout=10) == "answer"

    run(go())
    store = fresh_store(tmp_path)
    read: list[int] = []

    def cold(view):  # type: ignore[no-untyped-def]
        session = view.get_session("s")
        assert session.compacted_upto > 0, "the run compacted"
        held = ConversationCache().conversation(_Spy(view, read), session, 1).history()
        full = build_history(view.messages("s"), view.session_tool_tasks("s"))
        return session.compacted_upto, held, full

    upto, held, full = store.read(cold)
    assert held == full
    assert held.summary == "SUMMARY of the long questions"
    assert read and min(read) == upto + 1, "the load reads nothing the summary covers"


class _Spy:
    """A read view that notes the seq of every message read through it."""

    def __init__(self, view: ReadView, read: list[int]) -> None:
        self._view = view
        self._read = read

    def __getattr__(self, name: str) -> object:
        return getattr(self._view, name)

    def messages(self, session_id: str, after: int = 0) -> list[MessageRecord]:
        found = list(self._view.messages(session_id, after))
        self._read.extend(m.seq for m in found)
        return found
