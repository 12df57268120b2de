"""Wake queues, chosen by URL."""

from __future__ import annotations

from fxdurable.errors import ConfigurationError
from fxdurable.queues.base import WakeQueue
from fxdurable.queues.local import LocalQueue

__all__ = ["LocalQueue", "WakeQueue", "open_queue"]


def open_queue(url: str) -> WakeQueue:
    """``local`` (in-process, the embedded default) or ``rq://host:port/db?queue=name``."""
    scheme = url.split(":", 1)[0]
    if url == "local":
        return LocalQueue()
    if scheme in ("rq", "rqs"):
        from fxdurable.queues.rq import RqQueue

        return RqQueue(url)
    raise ConfigurationError(
        f"unknown queue URL {url!r}: expected 'local' or rq://host:port/db?queue=name "
        "(sqs:// comes with the serverless work)"
    )
