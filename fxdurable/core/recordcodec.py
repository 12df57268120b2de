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
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, cast

from fxdurable.core.codec import JsonObject, JsonValue

__all__ = ["OMIT_DEFAULT", "compile_codecs", "decode", "encode"]

R = TypeVar("R")


Convert: TypeAlias = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # The JSON aliases are recursive (forward references by name): resolve them here.
    return typing.get_type_hints(cls, localns={"JsonValue": JsonValue, "JsonObject": JsonObject})


def _optional_inner(tp: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _is_record(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


# Converters are compiled once per type (records are encoded and decoded on every step, so
# walking type hints per value would dominate a step's CPU).


_OMIT_DEFAULT_KEY = "fxd_omit_default"
# ``field(default=..., metadata=OMIT_DEFAULT)``: not encoded while it holds its default.
OMIT_DEFAULT: dict[str, bool] = {_OMIT_DEFAULT_KEY: True}


@functools.cache
def _encoder(tp: Any) -> Convert | None:
    """None when values of ``tp`` are already JSON-ready (StrEnums are ``str``)."""
    tp = _optional_inner(tp)
    if _is_record(tp):
        fields = [(f.name, _encoder(_hints(tp)[f.name])) for f in dataclasses.fields(tp)]
        # Fields added later with ``metadata=OMIT_DEFAULT`` are left out at their default, so
        # a record that does not use them keeps the bytes it was stored with (Redis members,
        # DynamoDB bodies); decoding fills a missing key with its default.
        # Compared as encoded: a tuple default is stored as a list.
        converters = dict(fields)
        defaults = {
            f.name: _encoded_default(f.default, converters[f.name])
            for f in dataclasses.fields(tp)
            if f.metadata.get(_OMIT_DEFAULT_KEY)
        }

        def encode_record(value: Any) -> Any:
            if value is None:
                return None
            return {
                name: (conv(getattr(value, name)) if conv else getattr(value, name))
                for name, conv in fields
            }

        if not defaults:
            return encode_record

        def encode_sparse(value: Any) -> Any:
            encoded = encode_record(value)
            if encoded is not None:
                for name, default in defaults.items():
                    if encoded[name] == default:
                        del encoded[name]
            return encoded

        return encode_sparse
    if typing.get_origin(tp) is tuple:
        item = _encoder(typing.get_args(tp)[0])
        if item is not None:
            return lambda value: None if value is None else [item(v) for v in value]
    return None


def _encoded_default(default: Any, conv: Convert | None) -> Any:
    if conv is not None:
        return conv(default)
    return list(default) if isinstance(default, tuple) else default


@functools.cache
def _decoder(tp: Any) -> Convert | None:
    """None when the decoded JSON value is already the field's value."""
    inner = _optional_inner(tp)
    if _is_record(inner):
        hints = _hints(inner)
        fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(inner)}
        cls = inner

        def decode_record(value: Any) -> Any:
            if value is None:
                return None
            # Unknown keys (a newer writer) are ignored; missing ones take their defaults.
            kwargs = {}
            for key, item in value.items():
                if key in fields:
                    conv = fields[key]
                    kwargs[key] = item if conv is None or item is None else conv(item)
            return cls(**kwargs)

        return decode_record
    if typing.get_origin(inner) is tuple:
        item = _decoder(typing.get_args(inner)[0]) or _identity
        return lambda value: None if value is None else tuple(item(v) for v in value)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return inner
    return None


def encode(record: object) -> str:
    conv = _encoder(cast(Any, type(record)))
    plain = conv(record) if conv is not None else record
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode(cls: type[R], text: str | bytes) -> R:
    conv = _decoder(cast(Any, cls))
    value = json.loads(text)
    result: R = conv(value) if conv is not None else value
    return result


def compile_codecs(*classes: type) -> None:
    """Build the converters of ``classes`` now rather than at their first record. A forking
    worker does it once before its first fork, so that no work horse repeats it (resolving a
    record's type hints takes milliseconds; a horse runs one job and exits)."""
    for cls in classes:
        _encoder(cast(Any, cls))
        _decoder(cast(Any, cls))
