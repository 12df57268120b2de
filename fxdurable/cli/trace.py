"""``fxdurable trace SESSION --db PATH``: a session's timeline, one line per step.

The lines are built by :mod:`fxdurable.runtime.timeline`, which ``GET /sessions/{id}/trace``
answers from too: this module only prints them.
"""

from __future__ import annotations

import sys
from typing import TextIO

from fxdurable.core.store import ReadView, Store
from fxdurable.runtime.render import Style
from fxdurable.runtime.timeline import Totals, aborted_partials, build_timeline, stop_note

__all__ = ["Totals", "aborted_partials", "print_trace", "stop_note"]


def print_trace(store: Store, session_id: str, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    style = Style(out)

    def read(view: ReadView) -> int:
        timeline = build_timeline(view, session_id, style)
        if timeline is None:
            known = ", ".join(s.id for s in view.list_sessions()[:10]) or "none"
            print(f"no session {session_id!r} in {store.url} (sessions: {known})", file=sys.stderr)
            return 2
        for line in timeline.lines:
            print(line.printed(), file=out)
        return 0

    return store.read(read)
