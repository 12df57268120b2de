"""Finding sessions that need a wake: unsettled work and no live owner.

Run at a worker's start and periodically after (DESIGN §3.9, §9): it recovers sessions whose
worker died (an expired lease, or a holder process on this host that no longer exists) and
sessions whose wake was lost between a check and a release.
"""

from __future__ import annotations

from fxdurable.core.store import ReadView
from fxdurable.runtime.worker import local_process_is_dead

__all__ = ["orphaned_sessions"]


def orphaned_sessions(view: ReadView, *, now: float) -> list[str]:
    found = []
    for session in view.active_sessions():
        lease = session.lease
        live = lease.owner is not None and lease.expires_at > now
        dead_here = (
            live
            and lease.host is not None
            and lease.pid is not None
            and local_process_is_dead(lease.host, lease.pid)
        )
        if not live or dead_here:
            found.append(session.id)
    return found
