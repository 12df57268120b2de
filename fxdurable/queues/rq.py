"""The RQ queue: a wake is an RQ job on a Redis list, run by ``fxdurable worker`` or ``rq worker``.

``rq://host:port/db?queue=fxdurable&job_timeout=600`` (``rqs://`` for TLS). The job runs
:func:`fxdurable.workers.rq_job.run_wake`, which claims the session and runs it until it rests
or the job nears its timeout, then enqueues a continuation. RQ's own registries (failed,
abandoned, finished) are not the truth: a wake that RQ lost or marked failed is found again by
the reconciliation scan, because the store still says the session has work.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

from fxdurable.core import tracecontext
from fxdurable.errors import ConfigurationError, QueueUnavailableError

__all__ = ["RqQueue", "RqSettings", "parse_rq_url"]

JOB_FUNCTION = "fxdurable.workers.rq_job.run_wake"


@dataclass(frozen=True, slots=True)
class RqSettings:
    redis_url: str
    queue: str = "fxdurable"
    job_timeout_s: int = 600


def parse_rq_url(url: str) -> RqSettings:
    parsed = urlparse(url)
    if parsed.scheme not in ("rq", "rqs"):
        raise ConfigurationError(f"not an RQ URL: {url!r} (expected rq://host:port/db)")
    options = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
    queue = options.pop("queue", "fxdurable") or "fxdurable"
    try:
        timeout = int(options.pop("job_timeout", "600"))
    except ValueError as exc:
        raise ConfigurationError(f"job_timeout must be whole seconds in {url!r}") from exc
    if timeout < 10:
        raise ConfigurationError(f"job_timeout must be at least 10 seconds in {url!r}")
    if options:
        raise ConfigurationError(f"unknown RQ URL options {sorted(options)} in {url!r}")
    scheme = "rediss" if parsed.scheme == "rqs" else "redis"
    redis_url = f"{scheme}://{parsed.netloc}{parsed.path or '/0'}"
    return RqSettings(redis_url=redis_url, queue=queue, job_timeout_s=timeout)


def _import_rq() -> tuple[Any, Any]:
    try:
        import redis
        import rq
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the RQ queue needs the redis extra: pip install 'fxdurable[redis]'"
        ) from exc
    return redis, rq


# What redis-py raises, as the project's errors, at the one boundary (check, enqueue_now):
# first match wins, so subclasses come before their bases (redis-py's AuthenticationError and
# BusyLoadingError are ConnectionErrors, its ReadOnlyError and OutOfMemoryError
# ResponseErrors). QueueUnavailableError: the same call may succeed later (the worker waits,
# the scan rides it out, a submission is admitted and its wake left to the scan);
# ConfigurationError: it answered and refused, waiting will not help. The messages name the
# address, never the password (the exception's text is kept only for refusals, which quote
# no URL).
_REDIS_ERRORS: tuple[tuple[tuple[str, ...], type[Exception] | None, str], ...] = (
    (
        ("AuthenticationError", "AuthorizationError", "NoPermissionError"),
        ConfigurationError,
        "the RQ Redis at {address} refused the credentials",
    ),
    (("BusyLoadingError",), QueueUnavailableError, "the RQ Redis at {address} is loading its data"),
    (("TimeoutError",), QueueUnavailableError, "the RQ Redis at {address} did not answer in time"),
    (
        ("ConnectionError", "OSError"),
        QueueUnavailableError,
        "cannot reach the RQ Redis at {address}; is redis-server running?",
    ),
    (("ReadOnlyError",), QueueUnavailableError, "the RQ Redis at {address} is a read-only replica"),
    (
        ("OutOfMemoryError",),
        QueueUnavailableError,
        "the RQ Redis at {address} is out of memory (maxmemory)",
    ),
    # None: the caller's call. A refusal of the ping at start (a wrong database) is
    # configuration; of a wake (MISCONF: it cannot persist), the queue is away for now.
    (("ResponseError",), None, "the RQ Redis at {address} refused to answer"),
    (("RedisError",), QueueUnavailableError, "the RQ Redis at {address} failed"),
)


class RqQueue:
    delays_wakes = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.settings = parse_rq_url(url)
        redis, rq = _import_rq()
        self._redis = redis.Redis.from_url(self.settings.redis_url)
        self.queue: Any = rq.Queue(self.settings.queue, connection=self._redis)

    def check(self) -> None:
        """Raise if Redis does not answer, naming the address (never the password):
        :class:`QueueUnavailableError` when it cannot be reached or times out (it may come up:
        ``fxdurable worker`` waits for it), :class:`ConfigurationError` when it answers and
        refuses (credentials, a wrong database)."""
        try:
            self._redis.ping()
        except Exception as exc:
            raise self._mapped(exc, "a ping", refused=ConfigurationError) from None

    def enqueue_now(self, session_id: str, *, reason: str) -> None:
        """Synchronous enqueue (for callers outside an event loop). A Redis that cannot be
        reached, times out, or refuses the wake for now (out of memory, a read-only replica,
        MISCONF) raises :class:`~fxdurable.errors.QueueUnavailableError`; one that refuses
        the credentials, :class:`~fxdurable.errors.ConfigurationError`. The messages name the
        address, never the password (:data:`_REDIS_ERRORS`)."""
        try:
            self._enqueue(session_id, reason)
        except Exception as exc:
            raise self._mapped(exc, "a wake not taken", refused=QueueUnavailableError) from None

    def _mapped(self, exc: Exception, doing: str, *, refused: type[Exception]) -> Exception:
        """The project's error for what redis-py (or the socket under it) raised: the first
        row of :data:`_REDIS_ERRORS` that matches (``refused`` for a refusal); anything else
        (a bug) as it is."""
        redis, _ = _import_rq()
        where = urlparse(self.settings.redis_url)
        address = f"{where.hostname}:{where.port or 6379}"
        for names, error, says in _REDIS_ERRORS:
            classes = tuple(
                OSError if name == "OSError" else getattr(redis.exceptions, name) for name in names
            )
            if not isinstance(exc, classes):
                continue
            message = f"{says.format(address=address)} ({doing}: {type(exc).__name__})"
            if (error or refused) is ConfigurationError:
                return ConfigurationError(f"{message}: {exc}")
            return QueueUnavailableError(message, url=f"rq://{address}{where.path}")
        return exc

    def _enqueue(self, session_id: str, reason: str) -> None:
        trace_parent = tracecontext.current_traceparent()
        self.queue.enqueue_call(
            JOB_FUNCTION,
            args=(session_id, reason),
            # Only when traced, so a wake without tracing runs on a worker of any version.
            kwargs={"trace_parent": trace_parent} if trace_parent else None,
            timeout=self.settings.job_timeout_s,
            # Results are not kept and nothing reads them: the store holds the outcome.
            result_ttl=0,
            failure_ttl=24 * 3600,
            description=f"fxdurable wake {session_id} ({reason})",
        )

    async def enqueue(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        # No delay: RQ delays a job only with its scheduler, which fxdurable's workers do not
        # run; a wake that comes before a model backoff ends sleeps out what it can instead
        # (TurnDriver._wait_out_model_backoff).
        await asyncio.to_thread(self.enqueue_now, session_id, reason=reason)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._redis.close)
