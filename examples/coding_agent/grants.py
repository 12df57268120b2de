""" "Yes, and don't ask again for this tool in this session": a grant, kept in the session's
own state (``ctx.state[GRANTS_KEY]``, a sorted list of tool names) in the runtime's store.

A grant is a person's choice, made between calls, so it is recorded by a journal transition
of its own (:meth:`fxdurable.core.journal.Journal.update_state`), announced by a
``state.changed`` event, and read by the page's ``before_tool`` from the state the turn
holds (:attr:`fxdurable.ToolCall.state`). Being in the store, it survives a SIGKILL of any
process, is seen by whichever worker runs the next call, and is part of what a fork copies
and an erase removes. A revocation is the same transition, removing the name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fxdurable.core.codec import JsonObject
from fxdurable.core.session_state import StateWrites

__all__ = ["GRANTS_KEY", "grant", "granted", "revoke"]

GRANTS_KEY = "allowed_tools"


def granted(state: Mapping[str, Any]) -> tuple[str, ...]:
    """The tools a session's state grants (sorted; an ill-formed value grants none)."""
    value = state.get(GRANTS_KEY)
    if not isinstance(value, list):
        return ()
    return tuple(sorted({t for t in value if isinstance(t, str)}))


def _with(tools: set[str]) -> StateWrites:
    return StateWrites(set={GRANTS_KEY: sorted(tools)})


def grant(tool: str) -> Callable[[JsonObject], StateWrites]:
    """The update that adds ``tool`` (nothing written when it is granted already)."""

    def update(state: JsonObject) -> StateWrites:
        tools = set(granted(state))
        return StateWrites() if tool in tools else _with(tools | {tool})

    return update


def revoke(tool: str) -> Callable[[JsonObject], StateWrites]:
    """The update that removes ``tool`` (nothing written when it is not granted)."""

    def update(state: JsonObject) -> StateWrites:
        tools = set(granted(state))
        return _with(tools - {tool}) if tool in tools else StateWrites()

    return update
