"""Leases: who may write a session's turn, fenced by a token every claim moves on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fxdurable.core.asking import waits_for_input
from fxdurable.core.records import Lease
from fxdurable.core.states import AttemptStatus
from fxdurable.core.store import Tx

from ._base import ERASE_KEY, Claimed, Fence, Named, Transitions, WorkerIdentity
from ._scope import _SessionScope
from .turns import BeginReads, before_attempt, begin_in

# How much of the lease a renewal may spend waiting for the holder's transitions in flight
# before it goes through beside them (a store that hangs one must not also stop the renewal).
_RENEWAL_WAIT_SHARE = 0.1


class Leases(Transitions):
    def claim(
        self,
        session_id: str,
        worker: WorkerIdentity,
        *,
        ttl_s: float,
        holder_is_dead: Callable[[str, int], bool] = lambda host, pid: False,
    ) -> Fence | None:
        """Take the session's lease, or return None while another live owner holds it.

        A lease past its expiry is taken over; so is one whose holder ran on this host in a
        process ``holder_is_dead`` reports gone (a restarted process need not wait it out).
        Each claim bumps the fencing token, which makes every older fence stale.
        """

        def body(tx: Tx, scope: _SessionScope) -> Fence | None:
            return self._take(scope, session_id, worker, ttl_s, holder_is_dead)

        return self._transition(Named(session_id, visible=False), body)

    def claim_wake(
        self,
        session_id: str,
        worker: WorkerIdentity,
        *,
        ttl_s: float,
        holder_is_dead: Callable[[str, int], bool] = lambda host, pid: False,
        begin_as: str | None = None,
        agent_version: str | None = None,
    ) -> Claimed | None:
        """``claim``, for a wake: the same lease taken, the same None while another live
        owner holds it, and in the same transaction what the wake decides from first (the
        unsettled submissions, whether this is a recovery), so that the wake reads none of it
        again.

        ``begin_as`` (the worker's name, as ``begin_attempt`` records it): also begin the
        oldest unsettled submission's attempt in the claim's own commit, when
        :func:`~.turns.before_attempt` says it may begin at once and the claim is no recovery
        (a recovery's claim commits alone: ``recovery.after-claim`` fires between it and the
        attempt that records the interrupted one). One commit fewer per wake; the records it
        leaves are exactly those of ``claim`` followed by ``begin_attempt``.
        """

        def body(tx: Tx, scope: _SessionScope) -> Claimed | None:
            fence = self._take(scope, session_id, worker, ttl_s, holder_is_dead)
            if fence is None:
                return None
            unsettled = tuple(tx.unsettled_submissions(session_id))
            histories = [tx.attempts(sub.id) for sub in unsettled]
            # A previous owner left an attempt running: this claim is a recovery.
            interrupted = any(h and h[-1].status == AttemptStatus.RUNNING for h in histories)
            start = None
            if begin_as is not None and unsettled and not interrupted:
                first = unsettled[0]
                turn = tx.get_turn(first.id)
                if before_attempt(first, turn) == "begin":
                    reads = BeginReads(unsettled, histories[0], turn)
                    start = begin_in(
                        tx,
                        scope,
                        fence,
                        first.id,
                        worker=begin_as,
                        agent_version=agent_version,
                        reads=reads,
                    )
            return Claimed(fence, unsettled, interrupted, start)

        return self._transition(Named(session_id, visible=False), body)

    def _take(
        self,
        scope: _SessionScope,
        session_id: str,
        worker: WorkerIdentity,
        ttl_s: float,
        holder_is_dead: Callable[[str, int], bool],
    ) -> Fence | None:
        """The claim itself, on the session ``scope`` holds: the new lease, or None."""
        now = scope.now
        lease = scope.session.lease
        if ERASE_KEY in scope.session.state:
            return None  # being erased (journal/erase.py): no worker runs it again
        if lease.owner is not None and lease.expires_at > now:
            abandoned = (
                lease.host == worker.host
                and lease.pid is not None
                and lease.pid != worker.pid
                and holder_is_dead(lease.host, lease.pid)
            )
            if not abandoned:
                return None
        owner = self._ids.new_id("lease")
        token = lease.token + 1
        new_lease = Lease(
            owner=owner,
            token=token,
            expires_at=now + ttl_s,
            host=worker.host,
            pid=worker.pid,
        )
        scope.session = replace(scope.session, lease=new_lease)
        return Fence(session_id, owner, token)

    def heartbeat(self, fence: Fence, *, ttl_s: float) -> None:
        """Extend the lease; raises LeaseLostError if it was taken over.

        The renewal first waits (up to a tenth of ``ttl_s``) for the holder's transitions of
        the session in flight in this process: it rewrites the session row they rely on, and
        would otherwise make them run again (:mod:`._gate`)."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            lease = replace(scope.session.lease, expires_at=scope.now + ttl_s)
            scope.session = replace(scope.session, lease=lease)

        self._gate.renewal(fence.session_id, wait_s=ttl_s * _RENEWAL_WAIT_SHARE)
        self._transition(fence, body)

    def release(self, fence: Fence) -> bool:
        """Give the lease up. Returns True when unsettled work remains (enqueue a wake).

        Release and the check for queued work are one transaction: a submission admitted just
        before the release is seen here, so its wake cannot be lost (DESIGN §9). A session
        whose next submission waits for a person's answer has no work a wake could do: the
        answer enqueues the wake.
        """

        def body(tx: Tx, scope: _SessionScope) -> bool:
            session = tx.get_session(fence.session_id)
            if session is None or session.lease.token != fence.token:
                return False  # already taken over: the new owner has the work
            if session.lease.owner == fence.owner:
                lease = replace(session.lease, owner=None, expires_at=0.0, host=None, pid=None)
                scope.open(session)
                scope.session = replace(session, lease=lease)
            unsettled = tx.unsettled_submissions(fence.session_id)
            return bool(unsettled) and not waits_for_input(unsettled[0])

        # Not fenced: a release after a takeover is no error, it has nothing to give up.
        return self._transition(None, body)
