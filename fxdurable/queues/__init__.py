"""Wake queues, chosen by URL."""

from __future__ import annotations

from fxdurable.errors import ConfigurationError
from fxdurable.queues.base import WakeQueue
from fxdurable.queues.local import LocalQueue

__all__ = ["LocalQueue", "WakeQueue", "open_queue"]


def open_queue(url: str) -> LocalQueue:
    """``local`` (in-process, the embedded default). ``rq://`` and ``sqs://`` come later."""
    if url == "local":
        return LocalQueue()
    raise ConfigurationError(
        f"unknown or unavailable queue URL {url!r}: this version supports 'local'"
    )
