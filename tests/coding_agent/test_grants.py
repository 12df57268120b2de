""" "Yes, and don't ask again" kept in the session's state: a grant recorded by a journal
transition (``Journal.update_state``) is honoured by the page's permission hook in a new
Runtime on the same SQLite store (nothing of it is in any process), and a revocation makes
the hook ask again. In process, with a stand-in ``shell`` tool (the page's real one runs in
tests/coding_agent/test_web.py, where the worker is SIGKILLed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest

import fxdurable as fx
from examples.coding_agent.agent import page_permissions
from examples.coding_agent.grants import GRANTS_KEY, grant, granted, revoke
from examples.coding_agent.settings import SessionSettings
from fxdurable.core.events import EventType
from fxdurable.testing import check_store

SESSION = "grants"
FAST = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)


class Command(pydantic.BaseModel):
    command: str


def _agent(tmp_path: Path, ran: list[str], turns: int) -> fx.Agent:
    @fx.tool(replay="unsafe")
    def shell(inp: Command, ctx: fx.ToolContext) -> str:
        "Run a command."
        ran.append(inp.command)
        return "ok"

    script = [fx.reply("", fx.call("shell", command="ls")), fx.reply("done")] * turns
    return fx.Agent(
        "coder",
        fx.ScriptedModel(script),
        tools=[shell],
        before_tool=page_permissions(SessionSettings(tmp_path / "settings.db")),
    )


async def _until(check: Callable[[], object]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


def _asked(rt: fx.Runtime) -> int:
    events = rt.journal.read(lambda v: v.events(SESSION))
    return [e.type for e in events].count(EventType.INPUT_REQUESTED)


async def _turn(rt: fx.Runtime, text: str, *, answer: fx.Answer | None = None) -> fx.Submission:
    """One turn; ``answer``: what to answer the question it is expected to ask."""
    s = rt.session(SESSION)
    asked = _asked(rt)
    sub = await s.submit(text)
    if answer is not None:
        await _until(lambda: _asked(rt) > asked)
        while await s.question() is None:
            await asyncio.sleep(0.01)
        await s.answer(answer)
    settled = await s.wait(sub.id, timeout=10)
    assert settled.status.value == "completed", settled
    return settled


def test_a_grant_in_the_sessions_state_holds_in_a_new_runtime_and_a_revoke_asks_again(tmp_path):
    store = f"sqlite:///{tmp_path / 'fxd.db'}"
    ran: list[str] = []

    async def first() -> None:
        async with fx.Runtime([_agent(tmp_path, ran, 1)], store=store, settings=FAST) as rt:
            await _turn(rt, "one", answer=fx.allow())  # asked: nothing granted yet
            state = await asyncio.to_thread(rt.journal.update_state, SESSION, grant("shell"))
            assert granted(state) == ("shell",)
            again = await asyncio.to_thread(rt.journal.update_state, SESSION, grant("shell"))
            assert again == state  # granted already: nothing written

    async def restarted() -> tuple[int, int]:
        async with fx.Runtime([_agent(tmp_path, ran, 2)], store=store, settings=FAST) as rt:
            await _turn(rt, "two")  # not asked: the grant is in the store
            held = _asked(rt)
            await asyncio.to_thread(rt.journal.update_state, SESSION, revoke("shell"))
            await _turn(rt, "three", answer=fx.deny("not now"))
            events = rt.journal.read(lambda v: v.events(SESSION))
            summary = rt.journal.read(lambda v: check_store(v, now=1e12, at_rest=True))
            assert not summary.violations, summary.violations
            changed = [e.data for e in events if e.type == EventType.STATE_CHANGED]
            assert changed == [
                {
                    "set": {GRANTS_KEY: ["shell"]},
                    "deleted": [],
                    "task": None,
                    "tool": None,
                    "step": None,
                },
                {"set": {GRANTS_KEY: []}, "deleted": [], "task": None, "tool": None, "step": None},
            ], changed
            return held, _asked(rt)

    asyncio.run(first())
    assert ran == ["ls"]
    held, after_revoke = asyncio.run(restarted())
    assert (held, after_revoke) == (1, 2)
    assert ran == ["ls", "ls"]  # the denied third call did not run


def test_grant_and_revoke_of_a_session_with_no_record_are_refused(tmp_path):
    async def main() -> None:
        store = f"sqlite:///{tmp_path / 'fxd.db'}"
        async with fx.Runtime([_agent(tmp_path, [], 1)], store=store, settings=FAST) as rt:
            for update in (grant("shell"), revoke("shell")):
                with pytest.raises(fx.SessionNotFoundError):
                    await asyncio.to_thread(rt.journal.update_state, "nobody", update)
            assert rt.journal.read(lambda v: v.list_sessions()) == []

    asyncio.run(main())
