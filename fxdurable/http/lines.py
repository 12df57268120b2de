"""The chat stream's line vocabulary: the journal's events as the HTTP API sends them.

Every journal event is one line whose ``type`` is the event's :class:`EventType` value and
whose ``data`` is its payload, except the two a client reads as turn boundaries: an admission
is sent as ``turn_start`` and a settlement as ``turn_end`` (its payload plus ``outcome``).
``keepalive`` and ``stream_end`` are markers of the stream itself, not events, and so is
``progress``: the running tool call's progress (polled state, the record's ``progress``
field), sent when it changed while no event came; its ``cursor`` is the last event's, so a
reconnect from it misses nothing (progress is never replayed: it is not history).
:func:`line_adapter` validates a line against this vocabulary and publishes it (one schema per
``type``, a discriminated union) in the OpenAPI document; the README's table is
:func:`markdown_table`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from fxdurable.core.events import (
    PAYLOADS,
    SETTLED_EVENTS,
    SETTLED_OUTCOME,
    WHEN,
    EventType,
    SubmissionAdmitted,
    SubmissionSettled,
)
from fxdurable.core.records import EventRecord

__all__ = [
    "WIRE_PAYLOADS",
    "Keepalive",
    "Marker",
    "Progress",
    "StreamEnd",
    "TurnEnd",
    "line_adapter",
    "line_for",
    "markdown_table",
    "marker_line",
    "progress_line",
    "wire_type",
]


class Marker(StrEnum):
    """Line types that are not journal event types."""

    TURN_START = "turn_start"
    TURN_END = "turn_end"
    KEEPALIVE = "keepalive"
    STREAM_END = "stream_end"
    PROGRESS = "progress"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd(SubmissionSettled):
    outcome: Literal["completed", "failed", "aborted"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Keepalive:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    reason: Literal["max_duration", "idle"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    task: str
    tool: str
    text: str


def wire_type(event_type: EventType) -> str:
    """The ``type`` of the line that carries an event of ``event_type``."""
    if event_type == EventType.SUBMISSION_ADMITTED:
        return Marker.TURN_START.value
    if event_type in SETTLED_EVENTS:
        return Marker.TURN_END.value
    return event_type.value


_BOUNDARIES = frozenset({EventType.SUBMISSION_ADMITTED, *SETTLED_EVENTS})
WIRE_PAYLOADS: Mapping[str, type[Any]] = {
    Marker.TURN_START.value: SubmissionAdmitted,
    **{t.value: PAYLOADS[t] for t in EventType if t not in _BOUNDARIES},
    Marker.TURN_END.value: TurnEnd,
    Marker.KEEPALIVE.value: Keepalive,
    Marker.STREAM_END.value: StreamEnd,
    Marker.PROGRESS.value: Progress,
}
_WIRE_WHEN: Mapping[str, str] = {
    Marker.TURN_START.value: "a prompt was admitted (`turnId` names its turn)",
    **{t.value: WHEN[t] for t in EventType if t not in _BOUNDARIES},
    Marker.TURN_END.value: "the submission settled: `outcome` is completed, failed or aborted",
    Marker.KEEPALIVE.value: "nothing happened for a while; the stream is alive",
    Marker.STREAM_END.value: "the server closes the stream (`idle`, `max_duration`); reconnect "
    "from `cursor`",
    Marker.PROGRESS.value: "the running tool call reported progress: `text` is the tail (4 KB) "
    "of its reports so far; state, not an event (its `cursor` is the last event's)",
}


def line_for(event: EventRecord) -> dict[str, Any]:
    """The wire form of one event. A type this version does not know (a newer writer's) keeps
    its journal name and data."""
    kind = event.type
    data = dict(event.data)
    turn_id = event.turn_id
    if kind == EventType.SUBMISSION_ADMITTED:
        kind = Marker.TURN_START.value
        turn_id = str(data.get("submission"))  # a turn is named after its submission
    elif kind in SETTLED_EVENTS:
        kind = Marker.TURN_END.value
        data["outcome"] = SETTLED_OUTCOME[EventType(event.type)]
    return {
        "cursor": event.seq,
        "type": kind,
        "sessionId": event.session_id,
        "turnId": turn_id,
        "at": event.at,
        "data": data,
    }


def marker_line(kind: Marker, session_id: str, cursor: int, **data: Any) -> dict[str, Any]:
    return {"cursor": cursor, "type": kind.value, "sessionId": session_id, "data": data}


def progress_line(
    session_id: str, cursor: int, *, turn_id: str, at: float, data: Progress
) -> dict[str, Any]:
    """A ``progress`` line: shaped like an event's line, at the cursor of the last event."""
    return {
        "cursor": cursor,
        "type": Marker.PROGRESS.value,
        "sessionId": session_id,
        "turnId": turn_id,
        "at": at,
        "data": dataclasses.asdict(data),
    }


# -- the published schema --------------------------------------------------------------------

# Strict and closed: a line whose data has an unknown field, or a field of another type, is
# not in the vocabulary (the HTTP tests validate every line they read against it).
_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)


class _MarkerLine(BaseModel):
    model_config = _CONFIG

    cursor: int = Field(description="resume the stream just after this line")
    session_id: str = Field(alias="sessionId")


class _EventLine(_MarkerLine):
    turn_id: str | None = Field(alias="turnId")
    at: float = Field(description="when the event was recorded (unix seconds)")


def _model_name(wire: str) -> str:
    words = wire.replace(".", "_").split("_")
    return "".join(w.capitalize() for w in words) + "Line"


def _line_model(wire: str, payload: type[Any]) -> type[BaseModel]:
    literal: Any = Literal[wire]  # built at run time: one schema per line type
    base = _MarkerLine if wire in (Marker.KEEPALIVE, Marker.STREAM_END) else _EventLine
    model: type[BaseModel] = create_model(
        _model_name(wire),
        __base__=base,
        __doc__=_WIRE_WHEN[wire],
        type=(literal, ...),
        data=(payload, ...),
    )
    return model


@functools.cache
def line_adapter() -> TypeAdapter[Any]:
    """Validates a line (``validate_json``) and gives its JSON schema. Built on first use:
    the models cost tens of milliseconds, which a cold start need not pay."""
    models = tuple(_line_model(wire, payload) for wire, payload in WIRE_PAYLOADS.items())
    union: Any = Annotated[Union[models], Field(discriminator="type")]  # noqa: UP007 (a tuple)
    return TypeAdapter(union)


# -- the README's table ----------------------------------------------------------------------


def _wire_type_name(annotation: str) -> str:
    """A field's annotation as JSON reads it: tuples are arrays, literals are strings."""
    text = re.sub(r"tuple\[(\w+), \.\.\.\]", r"list[\1]", annotation)
    text = re.sub(r"Literal\[([^]]*)\]", lambda m: m.group(1).replace(", ", " | "), text)
    text = text.replace("'", '"')
    text = text.replace("dict[str, object]", "{key: any JSON}")
    return text.replace("ErrorInfo", "{code, message, unknown_calls}")


def _fields(payload: type[Any]) -> str:
    fields = dataclasses.fields(payload)
    return ", ".join(f"`{f.name}`: {_wire_type_name(str(f.type))}" for f in fields) or "—"


def markdown_table() -> str:
    """The vocabulary as the README's table: one row per line ``type``."""
    rows = ["| type | when | data fields |", "|---|---|---|"]
    for wire, payload in WIRE_PAYLOADS.items():
        fields = _fields(payload).replace("|", "\\|")
        rows.append(f"| `{wire}` | {_WIRE_WHEN[wire]} | {fields} |")
    return "\n".join(rows)
