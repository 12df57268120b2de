"""What every store does with a transaction body's result."""

from __future__ import annotations

import inspect

__all__ = ["refuse_awaitable"]


def refuse_awaitable(result: object) -> None:
    """Raise TypeError for an awaitable (closing a coroutine so it warns of nothing): the
    durable core is synchronous, and an await inside a transaction would hold it open across
    arbitrary I/O."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(
            "a transaction body returned an awaitable: the durable core is "
            "synchronous, do the async work outside the transaction"
        )
