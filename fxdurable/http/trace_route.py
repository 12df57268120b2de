"""``GET /sessions/{id}/trace``: the timeline ``fxdurable trace`` prints, as JSON.

Both are built by :func:`fxdurable.runtime.timeline.build_timeline`; this module only shapes
its lines for the wire (without colour).
"""

from __future__ import annotations

from dataclasses import asdict

from fxdurable.core.store import ReadView
from fxdurable.http.schemas import TraceLine, TraceReply, TraceTotals
from fxdurable.runtime.render import Style
from fxdurable.runtime.timeline import build_timeline

__all__ = ["trace_reply"]


def trace_reply(view: ReadView, key: str, public_id: str) -> TraceReply | None:
    """The trace of the session stored at ``key``; None when it is gone."""
    timeline = build_timeline(view, key, Style.plain())
    if timeline is None:
        return None
    usage = timeline.usage
    return TraceReply(
        session_id=public_id,
        lines=[
            TraceLine(
                at=line.at,
                kind=line.kind,
                text=line.text,
                cursor=line.cursor,
                fork_after=line.fork_after,
            )
            for line in timeline.lines
        ],
        totals=TraceTotals(
            **{name: value for name, value in asdict(usage).items() if name != "calls"},
            turns=timeline.turns,
            attempts=timeline.attempts,
            interruptions=timeline.interruptions,
        ),
    )
