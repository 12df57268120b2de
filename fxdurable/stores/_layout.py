"""Forward-only layout migrations for the stores whose layout is keys or items (Redis, DynamoDB).

SQLite and PostgreSQL version their schema in a table; a Redis or DynamoDB store has only its
data marker. A backend's migrations are a numbered list of :class:`LayoutStep`: the step at
position *i* takes the store from layout *i + 1* to *i + 2* (layout 1 is the marker a first
open writes), so code with *n* steps is code of layout *n + 1*. Each step is declared
**compatible** (it only adds keys, items or fields that code of the layout before ignores
safely: an old worker keeps running on the migrated store during a rolling deploy) or
**breaking** (old code must stop first).

The marker holds two numbers: the store's *layout* and its *floor*, the oldest layout of code
that may open it (the number of the last breaking step applied, else 1). Code of layout *N*
opens a store of layout *M > N* when the floor is at most *N* (every step after *N* was
compatible) and refuses it otherwise, naming both. How a backend encodes the pair is its
module's decision (:mod:`._redis_layout`, :mod:`._ddb_layout`); both keep the field that
today's code reads as the floor, so a store migrated by compatible steps is still one that
released code of layout 1 opens.

Opening an older store (:func:`check_marker`): a writer applies the pending steps itself when
they are all compatible; a pending breaking step raises :class:`SchemaOutdatedError` naming
``fxdurable migrate URL``, which applies every step (:func:`migrate_layout`). A reader
(``create=False``) never migrates: it reads a store whose pending steps are compatible as it
is, and refuses one with a breaking step pending.

The loop (:func:`migrate_layout`) reads the marker, acts on what it read, and reads again:
claim the next step (a compare-and-set on the marker: its layout unchanged and no live
claim), run it, advance the marker (a compare-and-set on the claim), which clears the claim.
So two migrators run each step once: the second sees the first's claim and waits for the
marker to move. A write whose outcome is unknown (a timeout) is never taken as done or failed:
the next read says. A claim lives ``claim_ttl_s`` and is renewed while its step runs, so a
migrator killed mid-step is taken over once its claim lapses; a step that raises releases its
claim at once. Either way the marker still says the layout before the step, so the next
migrator runs that step again from the start: every step must be idempotent (finish what a
half run left, redo what it did).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from fxdurable.errors import SchemaOutdatedError, StoreError, StoreUnavailableError

__all__ = [
    "CLAIM_TTL_S",
    "LayoutStep",
    "Marker",
    "MarkerIO",
    "check_marker",
    "code_layout",
    "floor_of",
    "migrate_layout",
]

H = TypeVar("H")

CLAIM_TTL_S = 30.0  # renewed every third of it while a step runs
_WAIT_S = (0.05, 0.1, 0.2, 0.5, 1.0)  # polls of a marker another migrator holds


# No slots: calling a parametrised alias (``RedisStep(...)``) sets ``__orig_class__`` on the
# instance, which a frozen class with slots refuses (TypeError on Python 3.11).
@dataclass(frozen=True, kw_only=True)
class LayoutStep(Generic[H]):
    """One migration. ``apply`` gets the backend's handle (``H``) and must be idempotent: a
    migrator that dies or fails mid-step leaves the marker where it was, and the next one runs
    the step again from the start."""

    name: str
    compatible: bool
    apply: Callable[[H], None]


@dataclass(frozen=True, slots=True)
class Marker:
    """What a store's marker says: its layout, the oldest layout of code that may open it,
    and the token of a migrator holding a live claim on the next step (None: no claim)."""

    layout: int
    floor: int
    claim: str | None = None


class MarkerIO(Protocol[H]):
    """A backend's primitives; the loop above is :func:`migrate_layout`'s. Each write is one
    compare-and-set whose outcome the loop learns from its next :meth:`read`, so a write may
    raise :class:`~fxdurable.errors.StoreUnavailableError` with its outcome unknown."""

    @property
    def describe(self) -> str:
        """The store in messages: ``redis host:port/db (prefix 'fxd')``."""
        ...

    def read(self) -> Marker | None:
        """The marker as it is now (None: no store), with a claim only while it is live."""
        ...

    def create(self, layout: int, floor: int) -> None:
        """Write the marker of a new store, unless one exists."""
        ...

    def claim(self, layout: int, token: str, ttl_s: float) -> None:
        """Claim the step after ``layout``: only if the marker is still at ``layout`` and no
        live claim is held."""
        ...

    def renew(self, token: str, ttl_s: float) -> None:
        """Extend ``token``'s claim, only if it is still held."""
        ...

    def advance(self, token: str, layout: int, floor: int) -> None:
        """Move the marker to ``layout`` and ``floor`` and drop the claim, only if ``token``
        holds it and the marker is at ``layout - 1``."""
        ...

    def release(self, token: str) -> None:
        """Drop ``token``'s claim, only if it still holds it."""
        ...

    def apply(self, step: LayoutStep[H]) -> None:
        """Run ``step`` against the store, its driver's errors mapped to fxdurable's."""
        ...


def code_layout(steps: Sequence[LayoutStep[H]]) -> int:
    """The layout of code that knows ``steps``."""
    return 1 + len(steps)


def floor_of(steps: Sequence[LayoutStep[H]], layout: int) -> int:
    """The floor of a store at ``layout``: the number of the last breaking step up to it."""
    breaking = [n for n, step in enumerate(steps[: layout - 1], start=2) if not step.compatible]
    return breaking[-1] if breaking else 1


def check_marker(
    found: Marker, steps: Sequence[LayoutStep[H]], *, create: bool, describe: str, url: str
) -> bool:
    """Whether an open must migrate before it may use the store (I/O-free): True for a writer
    of a store with only compatible steps pending. Raises for a marker that is none of
    fxdurable's, a store this code is too old for, and a pending breaking step."""
    _refuse_foreign_or_newer(found, code_layout(steps), describe)
    if found.layout >= code_layout(steps):  # newer by compatible steps: what they add is ignored
        return False
    _refuse_breaking(found.layout, steps, describe=describe, url=url)
    return create


def _refuse_foreign_or_newer(found: Marker, ours: int, describe: str) -> None:
    if not 1 <= found.floor <= found.layout:
        raise StoreError(
            f"{describe} holds a marker that is not fxdurable's (layout {found.layout}, "
            f"floor {found.floor})"
        )
    if found.floor > ours:
        raise StoreError(
            f"{describe} holds fxdurable layout version {found.layout}, which only fxdurable "
            f"of layout {found.floor} or later may open; this fxdurable uses layout version "
            f"{ours}: upgrade fxdurable (or open it with a matching fxdurable)"
        )


def _refuse_breaking(
    layout: int, steps: Sequence[LayoutStep[H]], *, describe: str, url: str
) -> None:
    for number, step in enumerate(steps[layout - 1 :], start=layout + 1):
        if not step.compatible:
            raise SchemaOutdatedError(
                f"{describe} holds fxdurable layout version {layout}, this fxdurable uses "
                f"{code_layout(steps)}, and step {number} ({step.name}) is breaking: stop the "
                f"workers of the old release, run `fxdurable migrate {url}`, then start this one"
            )


def migrate_layout(
    io: MarkerIO[H],
    steps: Sequence[LayoutStep[H]],
    *,
    url: str,
    breaking: bool,
    claim_ttl_s: float = CLAIM_TTL_S,
) -> tuple[int, int]:
    """Bring the store to this code's layout; returns (layout before, layout after), 0 before
    for a store this call created. ``breaking``: apply breaking steps too (``fxdurable
    migrate``); a writer's open applies compatible ones only.

    Each turn of the loop reads the marker and makes one move from what it read; a move whose
    outcome is unknown is followed by a read like any other."""
    ours = code_layout(steps)
    token = secrets.token_hex(16)
    before: int | None = None
    done_at: int | None = None  # the layout whose step this migrator has run to its end
    claimed_at: int | None = None  # the layout whose step this migrator last tried to claim
    waits = unknown = 0
    while True:
        found = io.read()
        if found is None:
            # A new store is made at this code's layout: the steps would add nothing to an
            # empty one. Written only if absent: the next read says whose marker landed.
            before = 0
            unknown = _move(unknown, io.create, ours, floor_of(steps, ours))
            continue
        if before is None:
            before = found.layout
        _refuse_foreign_or_newer(found, ours, io.describe)
        if found.layout >= ours:
            return before, found.layout
        if not breaking:
            _refuse_breaking(found.layout, steps, describe=io.describe, url=url)
        layout = found.layout
        if found.claim is None:
            # A claim whose condition failed for a reason the read does not show (a clock
            # behind the store's) is tried again after a wait, never in a tight loop.
            if claimed_at == layout:
                time.sleep(_WAIT_S[min(waits, len(_WAIT_S) - 1)])
                waits += 1
            else:
                waits = 0
            claimed_at = layout
            unknown = _move(unknown, io.claim, layout, token, claim_ttl_s)
        elif found.claim != token:  # another migrator runs this step: wait for the marker
            time.sleep(_WAIT_S[min(waits, len(_WAIT_S) - 1)])
            waits += 1
        else:
            if done_at != layout:  # not again after an advance whose outcome was unknown
                _run(io, steps[layout - 1], layout, token, claim_ttl_s)
                done_at = layout
            floor = floor_of(steps, layout + 1)
            unknown = _move(unknown, io.advance, token, layout + 1, floor)


_UNKNOWN_MOVES = 5  # moves in a row whose outcome is unknown before the loop gives up


def _move(unknown: int, write: Callable[..., None], *args: object) -> int:
    """One compare-and-set of the marker; returns how many moves in a row had an unknown
    outcome (``unknown`` before it). Whether it landed is not asked of it either way: the
    caller reads the marker next."""
    try:
        write(*args)
    except StoreUnavailableError:
        if unknown + 1 >= _UNKNOWN_MOVES:
            raise
        time.sleep(_WAIT_S[min(unknown, len(_WAIT_S) - 1)])
        return unknown + 1
    return 0


def _run(io: MarkerIO[H], step: LayoutStep[H], layout: int, token: str, ttl_s: float) -> None:
    try:
        with _renewing(io, token, ttl_s):
            io.apply(step)
    except Exception as exc:
        # Free the step for the next migrator now rather than when the claim lapses.
        with contextlib.suppress(StoreError):
            io.release(token)
        if isinstance(exc, StoreError):
            raise
        raise StoreError(
            f"layout step {layout + 1} ({step.name}) failed on {io.describe}: {exc!r}; the "
            f"store stays at layout version {layout}: run the migration again"
        ) from exc


@contextlib.contextmanager
def _renewing(io: MarkerIO[H], token: str, ttl_s: float) -> Iterator[None]:
    """Renew the claim every third of its TTL while the step runs: a long step keeps it, a
    dead migrator's lapses. A missed renewal is not fatal: the next one may land, and if the
    claim lapsed and was taken over, this migrator's advance is refused and it waits."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            with contextlib.suppress(StoreError):
                io.renew(token, ttl_s)

    thread = threading.Thread(target=renew, name="fxdurable-layout-claim", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
