"""The journal: every durable write fxdurable can make, as a named transition.

"What can this system write?" is answered by :class:`Journal`'s docstring (DESIGN §2): one
method per transition, each one atomic store transaction, grouped by the state machine it
belongs to, one module each. Every transition runs through one template
(:meth:`~fxdurable.core.journal._base.Transitions._transition`): the fence check (methods
that act for a worker take its :class:`Fence` and refuse with
:class:`~fxdurable.errors.LeaseLostError` once another worker has taken the session over),
the body, the events appended to the session's gap-free sequence, and the session row
written back with its version check (which serialises writers on the session), all in one
commit. Every status change goes through :func:`~fxdurable.core.states.advance`, so an
illegal transition raises and the transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fxdurable.core.store import ReadView, Store

from ._base import (
    AttemptStart,
    Claimed,
    Exhausted,
    Fence,
    ModelRound,
    Outcome,
    StartNext,
    ToolStep,
    WorkerIdentity,
)
from ._held import Held
from ._scope import Written, _SessionScope
from .admission import Admission, Admissions
from .erase import EraseStart, Erasure
from .leases import Leases
from .questions import Questions
from .rounds import Rounds
from .session_items import SessionItems
from .sessions import MAX_PENDING_STEERING, Fork, Sessions, Steering
from .tools import MAX_PROGRESS_CHARS, ToolResult, Tools
from .turns import BeforeAttempt, Turns, before_attempt
from .webhooks import Webhooks

__all__ = [
    "MAX_PENDING_STEERING",
    "MAX_PROGRESS_CHARS",
    "Admission",
    "AttemptStart",
    "BeforeAttempt",
    "Claimed",
    "EraseStart",
    "Exhausted",
    "Fence",
    "Fork",
    "Held",
    "Journal",
    "ModelRound",
    "Outcome",
    "StartNext",
    "Steering",
    "ToolResult",
    "ToolStep",
    "WorkerIdentity",
    "Written",
    "_SessionScope",
    "before_attempt",
]

T = TypeVar("T")


class Journal(
    Admissions,
    Sessions,
    Leases,
    Turns,
    Rounds,
    Tools,
    Questions,
    Webhooks,
    Erasure,
    SessionItems,
):
    """Named durable transitions over a :class:`Store`. Synchronous; no I/O besides the store.

    Every durable write this system makes is one of these methods:

    - admission (:mod:`.admission`): ``admit``
    - sessions (:mod:`.sessions`): ``steer``, ``update_state``, ``request_abort``, ``fork``,
      ``admit_child``
    - leases (:mod:`.leases`): ``claim``, ``claim_wake``, ``heartbeat``, ``release``
    - turns and attempts (:mod:`.turns`): ``begin_attempt``, ``suspend``, ``settle``
    - model rounds (:mod:`.rounds`): ``record_model_call``, ``record_model_error``,
      ``record_partial``, ``interrupt_stream``, ``record_compaction``, ``record_model_switch``,
      ``reject_output``
    - tool tasks (:mod:`.tools`): ``start_tool``, ``start_tools``, ``record_step``,
      ``record_tool_retry``, ``finish_tool``, ``finish_tools``, ``record_progress``
    - questions (:mod:`.questions`): ``request_input``, ``answer_input``, ``expire_input``
    - settlement webhooks (:mod:`.webhooks`): ``webhook_delivered``, ``webhook_failed``
    - erasure (:mod:`.erase`): ``begin_erase``, ``erase_records``, ``unlink_fork``,
      ``finish_erase``
    - framework session items (:mod:`.session_items`): ``write_items``

    A test pins this list against the methods (``tests/core/test_journal_package.py``).

    Commits may be shared, never reordered (DESIGN §3.4): ``finish_tool`` and
    ``record_model_call`` take a ``start_next`` that starts the next call's intent in the
    same commit, ``start_tools`` starts a parallel batch's intents in one, and ``finish_tools``
    records the results of a batch's calls that arrived together in one, and ``claim_wake``
    begins a wake's attempt in its claim's commit. The lease
    holder's transitions take ``held``: the records its last commit wrote, which the
    transition writes from without reading them again, fenced by their versions in the
    statements, falling back to the ordinary read-check-write on any mismatch (:mod:`._held`).
    """

    @property
    def store_url(self) -> str:
        return self._store.url

    @property
    def store(self) -> Store:
        """The store itself, for what is not a journal transition: a tool's blobs (behind
        ``ctx.records`` / ``ctx.blobs``) and reads outside a turn's records."""
        return self._store

    def read(self, body: Callable[[ReadView], T]) -> T:
        """A read-only snapshot: the only way runtime code looks at the store."""
        return self._store.read(body)

    def now(self) -> float:
        """The journal's clock: the time its transitions record (and the retention sweep
        reads the index at, so its read and its re-check agree on "due")."""
        return self._clock.now()
