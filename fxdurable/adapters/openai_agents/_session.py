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
the store for the SDK's own ``Runner`` needs a journal transition of its own (issue 25; not
built: docs/frameworks/openai-agents.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.items import TResponseInputItem

from fxdurable.adapters.openai_agents._model import to_input_items
from fxdurable.errors import ConfigurationError

if TYPE_CHECKING:
    from fxdurable.runtime.runtime import SessionHandle

__all__ = ["DurableSession", "SessionReadOnlyError"]


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
