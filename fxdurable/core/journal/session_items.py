"""Framework session items: a conversation kept for a framework's own runner (the OpenAI
Agents SDK's ``Session``), in a session of its own whose agent is the framework's marker.

Each item is a JSON object in the session's state under its own key (``item.<seq>``, the seq
zero-padded so the keys sort in order), committed by a ``state.changed`` event like any
state: appending announces only the new items, popping and clearing only deleted keys, so the
state stays the fold of its events (``fxdurable check``) and each write is one commit that
carries what it changed. Such a session runs no turns; its items are bounded by the state's
bound (:data:`~fxdurable.core.session_state.MAX_STATE_BYTES`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fxdurable.core.codec import JsonValue
from fxdurable.core.events import EventType, SessionCreated
from fxdurable.core.records import SessionRecord
from fxdurable.core.session_state import StateWrites
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Tx
from fxdurable.errors import AgentMismatchError

from ._base import Transitions, _visible
from ._scope import _SessionScope

ITEM_PREFIX = "item."
IDLE = SessionStatus.IDLE  # such a session is never anything else
_NEXT = "items.next"  # the seq the next appended item takes (seqs are never reused)


def item_keys(state: dict[str, JsonValue]) -> list[str]:
    """The state's item keys, oldest first."""
    return sorted(k for k in state if k.startswith(ITEM_PREFIX))


class SessionItems(Transitions):
    def write_items(
        self,
        session_id: str,
        *,
        agent: str,
        add: Sequence[JsonValue] = (),
        pop: bool = False,
        clear: bool = False,
    ) -> JsonValue | None:
        """Append ``add``, then remove the latest item (``pop``: returned) or every item
        (``clear``), in one commit. The session is made (agent ``agent``, idle) by its first
        append; one of another agent is refused (:class:`AgentMismatchError`): a framework
        session never writes into a durable agent's."""

        def body(tx: Tx, scope: _SessionScope) -> JsonValue | None:
            session = tx.get_session(session_id)
            if session is None:
                if not add:
                    return None
                new = SessionRecord(id=session_id, agent=agent, status=IDLE, created_at=scope.now)
                scope.create(new)
                scope.emit(EventType.SESSION_CREATED, SessionCreated(agent=agent))
                state: dict[str, JsonValue] = {}
            else:
                _visible(session, session_id, None)
                if session.agent != agent:
                    raise AgentMismatchError(session_id, session.agent, agent)
                state = dict(scope.open(session).state)
            keys = item_keys(state)
            seq = state.get(_NEXT, 1)
            first = seq if isinstance(seq, int) else 1
            added = {f"{ITEM_PREFIX}{first + i:012d}": item for i, item in enumerate(add)}
            keys += list(added)
            gone = keys if clear else keys[-1:] if pop else []
            popped = None
            if pop and not clear and keys:
                popped = added.get(keys[-1], state.get(keys[-1]))
            sets: dict[str, JsonValue] = {k: v for k, v in added.items() if k not in gone}
            if added:
                sets[_NEXT] = first + len(added)
            deleted = tuple(k for k in gone if k not in added)
            scope.change_state(StateWrites(set=sets, deleted=deleted))
            return popped

        return self._transition(None, body)
