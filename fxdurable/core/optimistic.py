"""One retry-on-conflict engine for the stores that commit optimistically (Redis, DynamoDB).

Such a store runs a transaction body against reads it does not lock, and learns only at the
commit whether another writer got there first. It then runs the body again, on fresh reads.
:func:`optimistic` owns that loop once: how many runs, how long to wait between them, and
which error a caller meets when concurrent writers never let a run through. A store's run
raises :class:`Rerun` to ask for another one; any other exception ends the loop as it is.

:data:`UNKNOWN` is the one sentinel for "this run has not read the stored state" that a
store's conditional write consults before deciding to check a version itself or leave the
check to the commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TypeVar

from fxdurable.errors import StoreError

__all__ = ["UNKNOWN", "Rerun", "Unknown", "contention_backoff", "optimistic"]

T = TypeVar("T")

# A few runs go again at once (a conflict is usually one writer, and a second run wins);
# after that the runs are spread out with full jitter, doubling up to 2**8 ms.
_EAGER_RUNS: Final = 3
_BASE_S: Final = 0.001
_MAX_DOUBLINGS: Final = 8


class Unknown:
    """The type of :data:`UNKNOWN`: a stored state this run has not read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = Unknown()


class Rerun(BaseException):
    """Raised by a run: run the body again.

    A BaseException so that a transaction body catching ``Exception`` cannot swallow it
    (a store's reads may raise it from inside the body).

    ``delay`` (seconds) replaces the engine's backoff for this one wait: 0 for "at once"
    (the run only saw a stale view), or a store's own schedule (a reconnect).
    """

    def __init__(self, *, delay: float | None = None) -> None:
        super().__init__()
        self.delay = delay


def contention_backoff(rand: Callable[[], float]) -> Callable[[int], float]:
    """The wait after run ``n`` (0-based) met a concurrent writer: none for the first
    :data:`_EAGER_RUNS`, then ``rand() * 1 ms * 2**min(n, 8)`` (full jitter, so writers that
    collided do not collide again in step). ``rand`` returns a float in [0, 1)."""

    def delay(run: int) -> float:
        if run < _EAGER_RUNS:
            return 0.0
        return rand() * _BASE_S * (1 << min(run, _MAX_DOUBLINGS))

    return delay


def optimistic(
    body: Callable[[int], T],
    *,
    attempts: int,
    backoff: Callable[[int], float],
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``body(run)`` for ``run`` = 0, 1, … until it returns, and return that.

    A run that raises :class:`Rerun` is followed by a wait of ``backoff(run)`` seconds (or
    the delay the Rerun names; no wait when it is 0) and the next run. After ``attempts``
    runs that all reran, raises :class:`~fxdurable.errors.StoreError` saying that ``what``
    kept meeting concurrent writes. Any other exception propagates at once.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    for run in range(attempts):
        try:
            return body(run)
        except Rerun as rerun:
            if run + 1 == attempts:
                break
            delay = backoff(run) if rerun.delay is None else rerun.delay
            if delay > 0:
                sleep(delay)
    raise StoreError(f"{what} kept meeting concurrent writes: gave up after {attempts} runs")
