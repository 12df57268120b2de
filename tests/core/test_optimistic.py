"""The retry-on-conflict engine the Redis and DynamoDB stores share: runs, waits, give-up."""

from __future__ import annotations

import pytest

from fxdurable.core.optimistic import Rerun, contention_backoff, optimistic
from fxdurable.errors import ConflictError, StoreError


class Recorder:
    """A body that reruns ``reruns`` times (each with ``delay``), then returns its run."""

    def __init__(self, reruns: int, delay: float | None = None) -> None:
        self.reruns = reruns
        self.delay = delay
        self.runs: list[int] = []

    def __call__(self, run: int) -> int:
        self.runs.append(run)
        if len(self.runs) <= self.reruns:
            raise Rerun(delay=self.delay)
        return run


def test_returns_the_first_run_that_does_not_rerun() -> None:
    body, slept = Recorder(reruns=2), []
    got = optimistic(body, attempts=5, backoff=lambda run: 0.5 + run, what="x", sleep=slept.append)
    assert got == 2
    assert body.runs == [0, 1, 2]
    assert slept == [0.5, 1.5]  # backoff(run) after each rerun, in order


def test_a_rerun_naming_its_delay_replaces_the_backoff_and_zero_means_no_wait() -> None:
    slept: list[float] = []
    optimistic(
        Recorder(1, delay=0.25), attempts=3, backoff=lambda r: 9.0, what="x", sleep=slept.append
    )
    optimistic(
        Recorder(2, delay=0), attempts=3, backoff=lambda r: 9.0, what="x", sleep=slept.append
    )
    assert slept == [0.25]


def test_exhaustion_raises_store_error_naming_what_and_the_run_count() -> None:
    body, slept = Recorder(reruns=100), []
    with pytest.raises(StoreError) as err:
        optimistic(
            body, attempts=4, backoff=lambda r: 1.0, what="a transaction on X", sleep=slept.append
        )
    assert body.runs == [0, 1, 2, 3]
    assert len(slept) == 3  # no wait after the last run: nothing follows it
    assert str(err.value) == (
        "a transaction on X kept meeting concurrent writes: gave up after 4 runs"
    )
    assert not isinstance(err.value, ConflictError)  # the caller did nothing wrong


def test_other_errors_end_the_loop_at_once() -> None:
    runs: list[int] = []

    def body(run: int) -> None:
        runs.append(run)
        raise ConflictError("refused")

    with pytest.raises(ConflictError):
        optimistic(body, attempts=50, backoff=lambda r: 1.0, what="x", sleep=lambda s: None)
    assert runs == [0]


def test_rerun_gets_past_a_body_catching_exception() -> None:
    # A store's reads raise Rerun from inside a user's body; `except Exception` there must
    # not turn "read again" into a swallowed error.
    def body(run: int) -> int:
        try:
            if run == 0:
                raise Rerun
        except Exception:  # pragma: no cover - what must not happen
            return -1
        return run

    assert optimistic(body, attempts=2, backoff=lambda r: 0.0, what="x") == 1


def test_attempts_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        optimistic(lambda run: run, attempts=0, backoff=lambda r: 0.0, what="x")


def test_contention_backoff_schedule() -> None:
    top = contention_backoff(lambda: 1.0)  # the upper bound of each jittered wait
    assert [top(run) for run in range(3)] == [0.0, 0.0, 0.0]  # the first reruns go at once
    assert [top(run) for run in (3, 4, 8, 9, 49)] == [0.008, 0.016, 0.256, 0.256, 0.256]
    half = contention_backoff(lambda: 0.5)
    assert half(5) == pytest.approx(0.016)  # full jitter: rand() scales the whole wait
