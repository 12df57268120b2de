"""Erasure: a session's records deleted, in steps that a crash leaves resumable.

An erase is four transitions (the runtime's driver, :mod:`fxdurable.runtime.erase`, runs
them in order and again after a crash):

- ``begin_erase`` records the marker first: the state key ``fx.erase`` of the session
  (``{"started": t, "blobs": [...]}``, a ``state.changed`` like any), with the blobs the
  session names (its state's digests, its prompts', messages' and tool results'
  attachments: :mod:`fxdurable.core.journal.blob_refs`, the one definition of what names a
  blob). A turn queued or running refuses it
  (:class:`~fxdurable.errors.SessionBusyError`) unless ``force``: then the abort intent is
  recorded on it and the lease is fenced (a new token, no owner), so the worker running it
  loses the session at its next commit. A session being erased accepts nothing else:
  admission, steering and forks find no session (the marker says it is going).
- ``erase_records`` deletes up to ``limit`` of its records (model calls, attempts, turns,
  tool tasks, messages, events, submissions: each found from what remains, so a batch
  never depends on one before it), one transaction each, and answers how many it deleted;
  0 means only the session record is left.
- ``unlink_fork`` removes a fork's reference to its erased source: the fork keeps its own
  copies (:mod:`fxdurable.core.fork` copies records, not pointers), and its first event's
  ``forked_from`` names :data:`ERASED_SOURCE` instead.
- ``finish_erase`` deletes the session record, last: until then the marker holds, and an
  erase run again resumes where the last one stopped (every delete is idempotent).

Each step is one transaction through the template, so a kill between two leaves everything
before it committed and nothing after: the store holds the marker and a subset of the
records, and the next erase of the session (``fxdurable check`` names it) completes it. The
retention sweep erases through these same steps (``begin_erase(only_if_due=True)`` re-checks
that the session is still due: :mod:`fxdurable.core.retention`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fxdurable.core.blobs import is_digest
from fxdurable.core.crash import crash_point
from fxdurable.core.events import AbortRequested, EventType
from fxdurable.core.kinds import (
    ATTEMPT,
    EVENT,
    MESSAGE,
    MODEL_CALL,
    SESSION,
    SUBMISSION,
    TOOL_TASK,
    TURN,
)
from fxdurable.core.records import Lease, SessionRecord
from fxdurable.core.retention import NotDue, is_due
from fxdurable.core.session_state import StateWrites
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import SessionBusyError, SessionNotFoundError

from ._base import ERASE_KEY, Named, Transitions
from ._scope import _SessionScope
from .blob_refs import MANIFEST_KEY, blobs_named, marker_digests

__all__ = ["ERASED_SOURCE", "EraseStart", "Erasure"]

# What a fork's ``session.created`` names as its source once that source is erased.
ERASED_SOURCE = "(erased)"
DEFAULT_BATCH = 200


@dataclass(frozen=True, slots=True)
class EraseStart:
    """What ``begin_erase`` committed."""

    session_id: str
    blobs: tuple[str, ...]  # the digests it names (a manifest's entries not yet expanded)
    manifest: str | None  # the workspace manifest's digest, if it has one
    children: tuple[str, ...]  # its subagents' sessions, erased before it
    aborted: tuple[str, ...]  # submissions ``force`` marked aborted
    resumed: bool  # the marker was there already: a killed erase resumed


def _children(view: ReadView, session_id: str) -> tuple[str, ...]:
    tasks = view.session_tool_tasks(session_id)
    return tuple(dict.fromkeys(t.child_session for t in tasks if t.child_session))


class Erasure(Transitions):
    def begin_erase(
        self,
        session_id: str,
        *,
        owner: str | None = None,
        force: bool = False,
        only_if_due: bool = False,
    ) -> EraseStart:
        """Record the erase marker (see the module); idempotent for a session being erased.
        ``only_if_due`` (the retention sweep): raise :class:`~fxdurable.core.retention.NotDue`,
        nothing written, unless the session as read here is due by the journal's clock
        (core/retention.py), so one active again since the sweep's read is kept."""

        def body(tx: Tx, scope: _SessionScope) -> EraseStart:
            session = scope.session
            if owner is not None and session.owner != owner:
                raise SessionNotFoundError(session_id)
            marker = session.state.get(ERASE_KEY)
            resumed = isinstance(marker, dict)
            if only_if_due and not resumed and not is_due(session, scope.now):
                raise NotDue(session_id)
            unsettled = [s for s in tx.unsettled_submissions(session_id)]
            aborted: list[str] = []
            if unsettled and not resumed:
                if not force:
                    raise SessionBusyError(session_id, [s.id for s in unsettled])
                for sub in unsettled:
                    if not sub.abort_requested:
                        tx.put_submission(
                            replace(sub, abort_requested=True, version=sub.version + 1),
                            expected_version=sub.version,
                        )
                        aborted.append(sub.id)
            if isinstance(marker, dict):
                blobs = marker_digests(session)
            else:
                blobs = tuple(blobs_named(tx, session))
                # The fence moves on: a worker holding the lease fails its next commit.
                scope.session = replace(session, lease=Lease(token=session.lease.token + 1))
                scope.change_state(
                    StateWrites(set={ERASE_KEY: {"started": scope.now, "blobs": list(blobs)}})
                )
                if aborted:
                    scope.emit(
                        EventType.ABORT_REQUESTED, AbortRequested(submissions=tuple(aborted))
                    )
            manifest = session.state.get(MANIFEST_KEY)
            return EraseStart(
                session_id=session_id,
                blobs=blobs,
                manifest=manifest if isinstance(manifest, str) and is_digest(manifest) else None,
                children=_children(tx, session_id),
                aborted=tuple(aborted),
                resumed=resumed,
            )

        start = self._transition(Named(session_id, visible=False), body)
        crash_point("erase.after-marker")
        return start

    def erase_records(self, session_id: str, *, limit: int = DEFAULT_BATCH) -> int:
        """Delete up to ``limit`` of the session's records (not the session's own); how many
        were deleted (0: none is left). Refuses a session with no erase marker."""

        def body(tx: Tx, scope: _SessionScope) -> int:
            _require_marker(scope.session)
            return _delete_some(tx, session_id, limit)

        deleted = self._transition(Named(session_id, visible=False), body)
        if deleted:
            crash_point("erase.after-batch")
        return deleted

    def unlink_fork(self, fork_id: str, source_id: str) -> bool:
        """Make fork ``fork_id`` stop naming ``source_id`` (being erased) as its source;
        whether it did (False: it names another source, or no longer exists)."""

        def body(tx: Tx, scope: _SessionScope) -> bool:
            first = tx.events(fork_id, limit=1)
            if not first or first[0].data.get("forked_from") != source_id:
                return False
            event = first[0]
            tx.delete(EVENT, (fork_id, event.seq))
            tx.append_event(replace(event, data={**event.data, "forked_from": ERASED_SOURCE}))
            return True

        return self._transition(Named(fork_id, visible=False), body)

    def finish_erase(self, session_id: str) -> None:
        """Delete the session record: the last step. Refuses while records remain."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            _require_marker(scope.session)
            if _delete_some(tx, session_id, 1):
                raise RuntimeError(f"session {session_id!r} still has records to erase")
            tx.delete(SESSION, (session_id,))

        self._transition(Named(session_id, visible=False), body)


def _require_marker(session: SessionRecord) -> None:
    if ERASE_KEY not in session.state:
        raise RuntimeError(f"session {session.id!r} is not being erased: begin_erase first")


def _delete_some(tx: Tx, session_id: str, limit: int) -> int:
    """Delete up to ``limit`` records of the session, dependents first: a turn's model calls
    and a submission's attempts before the records they are found from."""
    done = 0
    subs = list(tx.submissions(session_id))
    tasks = list(tx.session_tool_tasks(session_id))
    messages = list(tx.messages(session_id))
    turn_ids = dict.fromkeys(
        [s.id for s in subs] + [t.turn_id for t in tasks] + [m.turn_id for m in messages]
    )
    for turn_id in turn_ids:
        for call in tx.model_calls(turn_id):
            if done >= limit:
                return done
            tx.delete(MODEL_CALL, (turn_id, call.round))
            done += 1
        if tx.get_turn(turn_id) is not None:
            if done >= limit:
                return done
            tx.delete(TURN, (turn_id,))
            done += 1
    for sub in subs:
        for attempt in tx.attempts(sub.id):
            if done >= limit:
                return done
            tx.delete(ATTEMPT, (sub.id, attempt.number))
            done += 1
    if done:
        return done  # the turns' and attempts' anchors go in the next batch
    batches: list[list[tuple[object, tuple[str | int, ...]]]] = [
        [(TOOL_TASK, (t.id,)) for t in tasks],
        [(MESSAGE, (session_id, m.seq)) for m in messages],
        [(EVENT, (session_id, e.seq)) for e in tx.events(session_id, limit=limit)],
        [(SUBMISSION, (s.id,)) for s in subs],
    ]
    for batch in batches:
        for kind, key in batch:
            if done >= limit:
                return done
            tx.delete(kind, key)  # type: ignore[arg-type]
            done += 1
    return done
