"""How a queue worker (:mod:`fxdurable.workers.queue_worker`) uses its queue, from the
environment: each queue's variables under a prefix of its own (``FXD_SQS_``, ``FXD_PG_``),
within that queue's limits."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError

__all__ = ["QueueLimits", "QueueWorkerSettings"]

log = logging.getLogger("fxdurable.worker")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueLimits:
    """What one queue allows: ``prefix`` names its variables (``FXD_SQS_``); ``legacy_prefix``
    is an older prefix still read, with a warning, when the new name is unset."""

    prefix: str
    max_wait_s: int
    max_concurrency: int
    legacy_prefix: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueWorkerSettings:
    """``wait_s`` is how long one receive waits for a wake (SQS's long poll; Postgres's safety
    poll behind LISTEN); ``visibility_s`` bounds how long a killed worker's wake stays hidden
    (the recovery delay after a SIGKILL, on top of the lease's); ``job_timeout_s`` how long one
    wake may run a session before the turn is handed to a continuation."""

    wait_s: int = 20
    visibility_s: int = 30
    job_timeout_s: float = 900.0
    concurrency: int = 1

    @classmethod
    def from_env(
        cls, limits: QueueLimits, *, concurrency: int | None = None
    ) -> QueueWorkerSettings:
        """``<prefix>WAIT_S`` (0 to the queue's maximum), ``<prefix>VISIBILITY_S`` (whole
        seconds, at least 1), ``<prefix>JOB_TIMEOUT_S`` (at least 1)."""
        defaults = cls()
        wait, visibility, job_timeout = (
            _env_number(limits, suffix, default)
            for suffix, default in (
                ("WAIT_S", defaults.wait_s),
                ("VISIBILITY_S", defaults.visibility_s),
                ("JOB_TIMEOUT_S", defaults.job_timeout_s),
            )
        )
        settings = cls(
            wait_s=int(wait),
            visibility_s=int(visibility),
            job_timeout_s=job_timeout,
            concurrency=defaults.concurrency if concurrency is None else concurrency,
        )
        p = limits.prefix
        if not 0 <= settings.wait_s <= limits.max_wait_s:
            raise ConfigurationError(f"{p}WAIT_S must be 0 to {limits.max_wait_s} seconds")
        if settings.visibility_s < 1:
            raise ConfigurationError(f"{p}VISIBILITY_S must be at least 1 second")
        if settings.job_timeout_s < 1:
            raise ConfigurationError(f"{p}JOB_TIMEOUT_S must be at least 1 second")
        if not 1 <= settings.concurrency <= limits.max_concurrency:
            raise ConfigurationError(f"--concurrency must be 1 to {limits.max_concurrency}")
        return settings


def _env_number(limits: QueueLimits, suffix: str, default: float) -> float:
    name = limits.prefix + suffix
    raw = _set(name)
    if limits.legacy_prefix is not None and (old := _set(limits.legacy_prefix + suffix)):
        legacy = limits.legacy_prefix + suffix
        # Said at every start, so the log of a deployment still on the old name shows it.
        if raw is None:
            log.warning("%s is deprecated for this worker: set %s instead", legacy, name)
            name, raw = legacy, old
        else:
            log.warning("%s is ignored: %s is set", legacy, name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, not {raw!r}") from None


def _set(name: str) -> str | None:
    raw = os.environ.get(name)
    return raw if raw is not None and raw.strip() else None
