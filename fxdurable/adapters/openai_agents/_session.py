"""A durable fxdurable session's conversation as an OpenAI Agents SDK ``Session`` (read-only).

``DurableSession(rt.session("ops-1"))`` satisfies the SDK's ``agents.memory.Session`` protocol
(0.24: ``session_id``, ``session_settings``, ``get_items``, ``add_items``, ``pop_item``,
``clear_session``). ``get_items`` reads the conversation the journal holds, as the adapter's
model sends it (:func:`~fxdurable.adapters.openai_agents._model.to_input_items`: user and
assistant messages, each ``function_call`` and its ``function_call_output``), so SDK code
that reads a session's memory reads a durable agent's turns, whichever worker ran them and
however many crashes they survived.

The writes are refused (:class:`SessionReadOnlyError`): a durable session's conversation is
its journal, appended by its turns (``session.run``), never edited from outside; a ``Runner``
given this session would add items the turns never made. A writable SDK ``Session`` kept in
the store for the SDK's own ``Runner`` is :class:`StoreSession` (its own session, written by
the journal's ``write_items``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

import pydantic
from agents.items import TResponseInputItem

from fxdurable.adapters.openai_agents._model import to_input_items
from fxdurable.core.codec import JsonValue
from fxdurable.core.journal.session_items import item_keys
from fxdurable.errors import AgentMismatchError, ConfigurationError
from fxdurable.runtime.crossing import durable

if TYPE_CHECKING:
    from fxdurable.runtime.runtime import Runtime, SessionHandle

__all__ = ["ITEMS_AGENT", "DurableSession", "SessionReadOnlyError", "StoreSession"]


class SessionReadOnlyError(ConfigurationError):
    """An SDK session write (``add_items``, ``pop_item``, ``clear_session``) on a durable
    session: its conversation is written by its turns only."""


class DurableSession:
    """The SDK ``Session`` view of one durable session (a :class:`~fxdurable.SessionHandle`).
    Each ``get_items`` reads the session's conversation from the store afresh (what the
    model of its next step would read: after a compaction, the summary and what follows)."""

    session_settings: Any = None  # the SDK's SessionSettings; a limit comes with get_items

    def __init__(self, handle: SessionHandle) -> None:
        self._handle = handle
        self.session_id: str = handle.id

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation as SDK input items, oldest first; with ``limit``, the latest
        ``limit`` of them (the SDK's convention), in order."""
        items = to_input_items(await self._handle.history())
        if limit is not None:
            return items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        raise self._refused("add_items")

    async def pop_item(self) -> TResponseInputItem | None:
        raise self._refused("pop_item")

    async def clear_session(self) -> None:
        raise self._refused("clear_session")

    def _refused(self, what: str) -> SessionReadOnlyError:
        return SessionReadOnlyError(
            f"DurableSession({self.session_id!r}).{what}: a durable session's conversation is "
            "its journal, written by its turns; send it work with session.run(...) or "
            "session.submit(...)"
        )

    def __repr__(self) -> str:
        return f"DurableSession({self.session_id!r})"


# The agent of a session that holds SDK items (it runs no turns): a durable agent's session is
# never written by a StoreSession, nor this one by a turn (AgentMismatchError either way).
ITEMS_AGENT = "openai-agents.session"


class StoreSession:
    """A writable SDK ``Session`` kept in fxdurable's store, for the SDK's own
    ``Runner.run(agent, input, session=StoreSession(rt, "chat-1"))``: the history the Runner
    adds is committed to the store (one journal transition per ``add_items`` /
    ``pop_item`` / ``clear_session``: ``Journal.write_items``) and read back by another
    process, after a restart. Only the memory is durable: the Runner's run itself (its model
    calls and tools) is not journaled; for that, use :func:`durable_agent`. The items are held
    in the session's state, so they are bounded by its 64 KiB (a write past it raises
    :class:`~fxdurable.errors.StateTooLargeError` and writes nothing)."""

    session_settings: Any = None

    def __init__(self, runtime: Runtime, session_id: str) -> None:
        self._journal = runtime.journal
        self.session_id: str = session_id

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items, oldest first; with ``limit``, the latest ``limit`` of them."""
        session = await durable(self._journal.read, lambda v: v.get_session(self.session_id))
        if session is None:
            return []
        if session.agent != ITEMS_AGENT:
            raise AgentMismatchError(self.session_id, session.agent, ITEMS_AGENT)
        state = session.state
        items: list[Any] = [state[k] for k in item_keys(dict(state))]
        if limit is not None:
            return items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            plain = [_plain(i) for i in items]
            await durable(self._journal.write_items, self.session_id, agent=ITEMS_AGENT, add=plain)

    async def pop_item(self) -> TResponseInputItem | None:
        popped: Any = await durable(
            self._journal.write_items, self.session_id, agent=ITEMS_AGENT, pop=True
        )
        return cast("TResponseInputItem | None", popped)

    async def clear_session(self) -> None:
        await durable(self._journal.write_items, self.session_id, agent=ITEMS_AGENT, clear=True)

    def __repr__(self) -> str:
        return f"StoreSession({self.session_id!r})"


def _plain(item: object) -> JsonValue:
    """An SDK item as JSON (the Runner hands dicts, sometimes pydantic objects)."""
    if isinstance(item, pydantic.BaseModel):
        item = item.model_dump(mode="json", exclude_unset=True)
    value: JsonValue = json.loads(json.dumps(item, default=str))
    return value
