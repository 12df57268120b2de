"""JSON encoding for records: canonical (sorted keys, compact) so equal values encode equally."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue", "dumps", "loads_object"]

JsonValue: TypeAlias = (
    str | int | float | bool | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
)
JsonObject: TypeAlias = Mapping[str, JsonValue]


def dumps(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads_object(text: str) -> JsonObject:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
