"""Finding sessions that need a wake: unsettled work and no live owner.

Run at a worker's start and periodically after (DESIGN §3.9, §9): it recovers sessions whose
worker died (an expired lease, or a holder process on this host that no longer exists) and
sessions whose wake was lost between a check and a release.

A session nobody holds may simply have its wake waiting in a durable queue (RQ) behind a
backlog. Waking it again at every scan of every worker multiplies the queue's work, so
``quiet_s`` skips such sessions until nothing has happened in them for that long. Sessions
whose holder died are never made to wait: their lease says so.

A session whose next submission waits for a person's answer (``needs_input``) is not woken
while nobody holds it: there is nothing a worker could do before the answer, which enqueues
its own wake. (One whose holder died still is: the wake frees the lease.) Unless its question
has a timer that is due (``ask(timeout_s=)``): the scan is what fires a timer whose delayed
wake was lost, or that came due while no worker ran, or on a queue that cannot delay.
"""

from __future__ import annotations

from fxdurable.core.asking import expired_question, waits_for_input
from fxdurable.core.store import ReadView
from fxdurable.runtime.worker import local_process_is_dead

__all__ = ["orphaned_sessions"]


def orphaned_sessions(view: ReadView, *, now: float, quiet_s: float = 0.0) -> list[str]:
    found = []
    for session in view.active_sessions():
        lease = session.lease
        if lease.owner is not None:
            live = lease.expires_at > now
            dead_here = (
                live
                and lease.host is not None
                and lease.pid is not None
                and local_process_is_dead(lease.host, lease.pid)
            )
            if not live or dead_here:
                found.append(session.id)
            continue
        if any(w.next_at <= now for w in session.webhooks):
            found.append(session.id)  # a settlement webhook is due: the wake sends it
            continue
        unsettled = view.unsettled_submissions(session.id)
        if not unsettled and session.webhooks:
            continue  # owes only webhooks whose retry is not due yet
        if unsettled and expired_question(unsettled[0], now):
            found.append(session.id)  # its timer is due: the wake records the timeout
            continue
        if unsettled and waits_for_input(unsettled[0]):
            continue  # waits for a person; the answer wakes it
        if quiet_s > 0:
            last = view.events(session.id, after=session.next_event_seq - 2, limit=1)
            if last and now - last[0].at < quiet_s:
                continue  # its wake is most likely still queued
        found.append(session.id)
    return found
