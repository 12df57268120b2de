"""Retrying a tool call on transient errors: ``define_tool(..., retry=fx.Retry(...))``.

A call whose function raises one of the errors its :class:`Retry` names is run again within
the same execution — the same ``ctx.execution_id``, so a downstream that dedupes on it sees
one operation — after a backoff, up to ``attempts`` runs in all. Each failed run is recorded
(a ``tool.retrying`` event: the run, the error, the delay) before the wait, so the timeline
says why the call took longer; the call's ``ctx.state`` writes of a failed run are dropped,
as a failed call's are. ``timeout_s`` bounds the whole call, its retries and waits included.

Which errors: a ``safe`` or ``idempotent`` tool retries any ``Exception`` unless ``on`` says
otherwise (running it again is what its policy allows). An ``unsafe`` tool retries only on the
errors its ``on`` names — the ones the user knows mean the effect did not happen (a refused
connection, an HTTP 429 before the request was taken) — and must name them. Never retried:
the runtime's own errors (:class:`~fxdurable.errors.FxDurableError`, e.g. a tool call cut
short with its outcome unknown), cancellation, and a timeout of the whole call.

A crash during the backoff leaves the call running; recovery treats it as any interrupted
call of its policy (a safe one runs again with a fresh count of attempts, an unsafe one is
``outcome_unknown``). The decision — retry or not, and after how long — is
:meth:`Retry.delay_after`, free of I/O.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from fxdurable.errors import ConfigurationError, FxDurableError

__all__ = ["Retry", "run_retrying"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How a tool call is retried on transient errors.

    ``attempts``: runs in all (the first included), at least 2. ``backoff_s``: the wait
    before the second run, doubling after each failure up to ``max_backoff_s``, with
    jitter (half fixed, half random). ``on``: the exception classes to retry (required for an
    ``unsafe`` tool; ``None`` means any ``Exception`` for a safe or idempotent one)."""

    attempts: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    on: tuple[type[BaseException], ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 2:
            raise ConfigurationError(
                f"Retry(attempts={self.attempts!r}): attempts counts every run, the first "
                "included; retrying needs at least 2"
            )
        if not (0 <= self.backoff_s <= self.max_backoff_s):
            raise ConfigurationError(
                f"Retry: backoff_s ({self.backoff_s!r}) must be between 0 and max_backoff_s "
                f"({self.max_backoff_s!r})"
            )
        if self.on is not None:
            on = self.on if isinstance(self.on, tuple) else (self.on,)
            if not on or not all(isinstance(c, type) and issubclass(c, Exception) for c in on):
                raise ConfigurationError(
                    f"Retry(on={self.on!r}): name one or more Exception classes"
                )
            object.__setattr__(self, "on", on)

    def check_for(self, tool: str, policy: str) -> None:
        """Refuse what this retry cannot do for ``tool``'s policy (at definition)."""
        if policy == "unsafe" and self.on is None:
            raise ConfigurationError(
                f"tool {tool!r}: an unsafe tool retries only on errors that mean its effect "
                "did not happen; name them: Retry(on=(ConnectionRefusedError, ...))"
            )

    def delay_after(
        self, failed_runs: int, error: BaseException, rng: random.Random
    ) -> float | None:
        """After ``failed_runs`` runs failed, the last with ``error``: the wait before the
        next run, or None to give up (the call fails with ``error``)."""
        if failed_runs >= self.attempts or not isinstance(error, Exception):
            return None
        if isinstance(error, FxDurableError):
            return None  # the runtime's own: a lost lease, an unknown outcome, a misuse
        if self.on is not None and not isinstance(error, self.on):
            return None
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** (failed_runs - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


# Records a failed run before the wait: (run number, the error, the delay in seconds).
OnRetry = Callable[[int, BaseException, float], Awaitable[None]]


async def run_retrying(
    run: Callable[[], Awaitable[T]],
    retry: Retry,
    *,
    on_retry: OnRetry,
    sleep: Callable[[float], Awaitable[None]],
    rng: random.Random,
) -> T:
    """``run()``, again after each retryable failure, until it returns or gives up."""
    failed = 0
    while True:
        try:
            return await run()
        except Exception as exc:
            failed += 1
            delay = retry.delay_after(failed, exc, rng)
            if delay is None:
                raise
            await on_retry(failed, exc, delay)
        await sleep(delay)
