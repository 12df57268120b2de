"""How the SQS worker uses its queue, from the environment (see
:mod:`fxdurable.workers.sqs_worker`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError
from fxdurable.workers.sqs_consumer import MAX_BATCH, MAX_WAIT_S

__all__ = ["SqsWorkerSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SqsWorkerSettings:
    """How the worker uses SQS. ``visibility_s`` bounds how long a killed worker's message
    stays hidden (the recovery delay after a SIGKILL, on top of the lease's); ``job_timeout_s``
    how long one message may run a session before the turn is handed to a continuation."""

    wait_s: int = MAX_WAIT_S
    visibility_s: int = 30
    job_timeout_s: float = 900.0
    concurrency: int = 1

    @classmethod
    def from_env(cls, *, concurrency: int | None = None) -> SqsWorkerSettings:
        """``FXD_SQS_WAIT_S`` (0-20), ``FXD_SQS_VISIBILITY_S`` (whole seconds, at least 1),
        ``FXD_SQS_JOB_TIMEOUT_S`` (at least 1)."""
        defaults = cls()
        settings = cls(
            wait_s=int(_env_number("FXD_SQS_WAIT_S", defaults.wait_s)),
            visibility_s=int(_env_number("FXD_SQS_VISIBILITY_S", defaults.visibility_s)),
            job_timeout_s=_env_number("FXD_SQS_JOB_TIMEOUT_S", defaults.job_timeout_s),
            concurrency=defaults.concurrency if concurrency is None else concurrency,
        )
        if not 0 <= settings.wait_s <= MAX_WAIT_S:
            raise ConfigurationError(f"FXD_SQS_WAIT_S must be 0 to {MAX_WAIT_S} seconds")
        if settings.visibility_s < 1:
            raise ConfigurationError("FXD_SQS_VISIBILITY_S must be at least 1 second")
        if settings.job_timeout_s < 1:
            raise ConfigurationError("FXD_SQS_JOB_TIMEOUT_S must be at least 1 second")
        if not 1 <= settings.concurrency <= MAX_BATCH:
            raise ConfigurationError(f"--concurrency must be 1 to {MAX_BATCH}")
        return settings


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, not {raw!r}") from None
