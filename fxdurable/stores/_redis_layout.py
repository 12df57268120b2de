"""The Redis store's layout marker and migrations (the mechanism: :mod:`._layout`).

**Encoding.** ``p:schema`` stays what every release has written and read: a bare integer.
It now means the *floor*, the oldest layout of code that may open the store; the layout
itself is ``p:layout``, written only when it differs from the floor (absent: equal). So
today's marker, a bare ``1`` and no ``p:layout``, is layout 1, floor 1; and a store migrated
by compatible steps keeps ``p:schema`` at the number code of an older layout compares its own
with (released code of layout 1 refuses anything but ``1`` there), so that code keeps running
on it, as the steps promise. ``p:migrating`` holds the token of the migrator running the next
step, with a TTL its migrator renews.

Every write is one ``EVALSHA`` of ``lua/layout.lua`` (claim, renew, advance, release: each a
compare-and-set, atomic on one node) or, for a new store, one ``MSETNX`` of both keys, which
writes neither if either exists. A lost answer is an unknown outcome: the loop reads the
marker again (``MGET``) and goes on from what it finds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis

from fxdurable.errors import StoreError, StoreUnavailableError
from fxdurable.stores._layout import (
    CLAIM_TTL_S,
    LayoutStep,
    Marker,
    check_marker,
    code_layout,
    floor_of,
    migrate_layout,
)
from fxdurable.stores._redis_setup import parse_url, redact
from fxdurable.stores._redis_wire import Command, Keys

__all__ = [
    "MIGRATIONS",
    "RedisLayout",
    "RedisMarker",
    "RedisStep",
    "apply_compatible",
    "check_opened",
    "migrate",
    "new_marker",
    "parse_marker",
]

_SCRIPT = resources.files("fxdurable.stores").joinpath("lua/layout.lua").read_bytes()


@dataclass(frozen=True, slots=True)
class RedisLayout:
    """What a Redis layout step works on: a client on the store's connections, and its keys
    (``keys.p`` is the prefix every key of the store begins with)."""

    client: redis.Redis
    keys: Keys


RedisStep = LayoutStep[RedisLayout]

# The layout steps after layout 1, in order (the first makes layout 2). None yet: blob keys
# came after layout 1 as keys older code never reads, without a step.
MIGRATIONS: tuple[RedisStep, ...] = ()


def layout_key(keys: Keys) -> str:
    return f"{keys.p}:layout"


def claim_key(keys: Keys) -> str:
    return f"{keys.p}:migrating"


def _marker_values(keys: Keys, layout: int, floor: int) -> dict[str, int]:
    """A new store's marker keys, written by one ``MSETNX`` (neither if either exists, so a
    marker is never half one writer's and half another's)."""
    values = {keys.schema: floor}
    if layout != floor:
        values[layout_key(keys)] = layout
    return values


def new_marker(keys: Keys, steps: Sequence[RedisStep]) -> Command:
    """What a writer's open sends: the marker of a new store at ``steps``' layout."""
    layout = code_layout(steps)
    values = _marker_values(keys, layout, floor_of(steps, layout))
    return ("MSETNX", *(part for pair in values.items() for part in pair))


Raw = bytes | str | None  # a value as redis-py returns it (bytes: the pool does not decode)


def parse_marker(schema: Raw, layout: Raw, describe: str) -> Marker | None:
    """The marker from the raw values of ``p:schema`` and ``p:layout`` (None: no store)."""
    if schema is None:
        return None
    try:
        floor = int(schema)
        return Marker(layout=floor if layout is None else int(layout), floor=floor)
    except ValueError:
        raise StoreError(f"{describe} holds a marker that is not fxdurable's") from None


def check_opened(
    schema: Raw,
    layout: Raw,
    steps: Sequence[RedisStep],
    *,
    create: bool,
    keys: Keys,
    where: str,
    url: str,
) -> bool:
    """Judge the marker an open read (``p:schema``, ``p:layout``): raises for no store, a
    foreign or newer one and a pending breaking step; True when the writer must apply
    compatible steps first."""
    found = parse_marker(schema, layout, f"redis {where}")
    if found is None:
        raise StoreError(
            f"no fxdurable store at redis {where}: no {keys.schema!r} key (check the "
            "database number and ?prefix=)"
        )
    return check_marker(found, steps, create=create, describe=f"redis {where}", url=url)


class RedisMarker:
    """The primitives :func:`~fxdurable.stores._layout.migrate_layout` drives, on ``pool``."""

    def __init__(self, pool: redis.ConnectionPool, keys: Keys, where: str) -> None:
        self._client = redis.Redis(connection_pool=pool)
        self._keys = keys
        self._where = where
        self._script = self._client.register_script(_SCRIPT)
        self._marker_keys = [keys.schema, layout_key(keys), claim_key(keys)]

    @property
    def describe(self) -> str:
        return f"redis {self._where}"

    @contextlib.contextmanager
    def _mapped(self, doing: str) -> Iterator[None]:
        """redis-py's errors as fxdurable's: a lost connection or a timeout is an unknown
        outcome (StoreUnavailableError), anything else refused (StoreError)."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"redis at {self._where} did not answer while {doing} ({exc}); the migration "
                "reads the marker again to learn what was applied",
                where=self._where,
                cause=exc,
            ) from exc
        except redis.RedisError as exc:
            raise StoreError(f"redis at {self._where} refused {doing}: {exc}") from exc

    def _cas(self, *argv: Any) -> None:
        with self._mapped(f"the layout marker's {argv[0]}"):
            self._script(keys=self._marker_keys, args=list(argv))

    def read(self) -> Marker | None:
        with self._mapped("reading the layout marker"):
            schema, layout, claim = self._client.mget(self._marker_keys)
        found = parse_marker(schema, layout, self.describe)
        if found is None or claim is None:
            return found
        return Marker(
            layout=found.layout,
            floor=found.floor,
            claim=str(claim) if isinstance(claim, str) else claim.decode(),
        )

    def create(self, layout: int, floor: int) -> None:
        with self._mapped("writing the layout marker"):
            self._client.msetnx(_marker_values(self._keys, layout, floor))

    def claim(self, layout: int, token: str, ttl_s: float) -> None:
        self._cas("claim", layout, token, _ms(ttl_s))

    def renew(self, token: str, ttl_s: float) -> None:
        self._cas("renew", token, _ms(ttl_s))

    def advance(self, token: str, layout: int, floor: int) -> None:
        self._cas("advance", token, layout, floor)

    def release(self, token: str) -> None:
        self._cas("release", token)

    def apply(self, step: RedisStep) -> None:
        with self._mapped(f"layout step {step.name!r}"):
            step.apply(RedisLayout(self._client, self._keys))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def apply_compatible(
    pool: redis.ConnectionPool, keys: Keys, where: str, steps: Sequence[RedisStep], *, url: str
) -> None:
    """A writer's open of an older store: apply its pending steps, all compatible (judged by
    :func:`check_opened`, and again by the loop, which reads the marker afresh)."""
    migrate_layout(RedisMarker(pool, keys, where), steps, url=url, breaking=False)


def migrate(
    url: str, *, migrations: Sequence[RedisStep] = MIGRATIONS, claim_ttl_s: float = CLAIM_TTL_S
) -> tuple[int, int]:
    """``fxdurable migrate redis://...``: apply every layout step the store lacks, breaking
    ones included; returns (layout before, layout after), 0 before for a new store."""
    target, kwargs = parse_url(url)
    pool = redis.ConnectionPool(**kwargs)
    try:
        io = RedisMarker(pool, Keys(target.prefix), target.where)
        return migrate_layout(
            io, migrations, url=redact(url), breaking=True, claim_ttl_s=claim_ttl_s
        )
    finally:
        pool.disconnect()
