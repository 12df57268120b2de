"""Records to JSON and back, one generic codec every store shares.

Fields are read from the dataclass definitions, so a new field needs no codec change. Nested
records, tuples of records and ``StrEnum`` statuses round-trip; unknown keys (written by a
newer version) are ignored so old readers survive a rolling deploy.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from typing import Any, TypeVar

from fxdurable.core.codec import JsonObject, JsonValue

__all__ = ["decode", "encode"]

R = TypeVar("R")


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def encode(record: object) -> str:
    return json.dumps(_plain(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # The JSON aliases are recursive (forward references by name): resolve them here.
    return typing.get_type_hints(cls, localns={"JsonValue": JsonValue, "JsonObject": JsonObject})


def _build(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        (item, *_rest) = typing.get_args(tp)
        return tuple(_build(item, v) for v in value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in names})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    return value


def decode(cls: type[R], text: str | bytes) -> R:
    result: R = _build(cls, json.loads(text))
    return result
