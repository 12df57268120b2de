"""``fxdurable trace SESSION --db PATH``: a session's timeline, one line per step."""

from __future__ import annotations

import sys
from typing import TextIO

from fxdurable.cli.render import Style, clock_time, describe
from fxdurable.core.store import ReadView, Store

__all__ = ["print_trace"]


def print_trace(store: Store, session_id: str, out: TextIO = sys.stdout) -> int:
    style = Style(out)

    def read(view: ReadView) -> int:
        session = view.get_session(session_id)
        if session is None:
            known = ", ".join(s.id for s in view.list_sessions()[:10]) or "none"
            print(f"no session {session_id!r} in {store.url} (sessions: {known})", file=sys.stderr)
            return 2
        subs = view.submissions(session_id)
        lease = "free" if session.lease.owner is None else f"held by {session.lease.host}"
        print(
            style.bold(f"session {session.id}")
            + f"  agent={session.agent} status={session.status} lease={lease} "
            f"submissions={len(subs)}",
            file=out,
        )
        for event in view.events(session_id):
            line = describe(event, style)
            if line is None:
                continue
            print(f"{event.seq:>4}  {clock_time(event.at)}  {line}", file=out)
        for sub in subs:
            extra = f" ({sub.error.code}: {sub.error.message})" if sub.error else ""
            print(
                f"submission {sub.id}: {sub.status} after {sub.attempts} attempt(s), "
                f"{sub.interruptions} interrupted{extra}",
                file=out,
            )
        return 0

    return store.read(read)
