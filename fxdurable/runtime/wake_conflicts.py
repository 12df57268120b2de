"""A wake that meets a store conflict runs again in the same invocation, from fresh reads.

A :class:`~fxdurable.errors.ConflictError` out of a wake means a record changed under the
turn between its read and its commit (another writer got there first: a steer, an abort, a
heartbeat of the same process). The store has already dropped what it read; running the wake
again reads the records as they are now and decides again. Left to the queue instead, each
conflict would cost an SQS delivery and count towards the dead-letter queue, for a session
that is perfectly runnable: so the wake functions (Lambda's, the SQS worker) run it again here,
a few times with a short pause, and only then hand it on — as a fresh wake, which starts its
own receive count — rather than fail the message.

A conflict that outlives :data:`CONFLICT_HAND_ONS` fresh wakes is not a race any more: the
fresh wake's reason counts its hand-ons (``after conflict 2 (submitted)``), and the wake that
reaches the bound is failed to the queue instead, so its receive count leads to the
dead-letter queue where someone looks at it, rather than a wake going round for ever.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re

from fxdurable.errors import ConflictError
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.worker import WakeHandler

__all__ = ["CONFLICT_HAND_ONS", "CONFLICT_RUNS", "handed_on_reason", "handle_wake"]

log = logging.getLogger("fxdurable.worker")

#: Runs of one wake in one invocation before a conflict is handed on.
CONFLICT_RUNS = 4
_PAUSE_S = 0.05  # doubled each run, with jitter: the other writer's commit is milliseconds
#: Fresh wakes a still-conflicting session is handed on as before its wake fails to the queue.
CONFLICT_HAND_ONS = 3
_HANDED_ON = re.compile(r"after conflict (\d+) \((.*)\)", re.S)


def handed_on_reason(reason: str) -> str | None:
    """The reason of the fresh wake that a wake of ``reason``, still conflicting, is handed on
    as; None once ``reason`` was itself handed on :data:`CONFLICT_HAND_ONS` times (fail it)."""
    handed = _HANDED_ON.fullmatch(reason)
    count, original = (int(handed[1]), handed[2]) if handed else (0, reason)
    if count >= CONFLICT_HAND_ONS:
        return None
    return f"after conflict {count + 1} ({original})"


async def handle_wake(handler: WakeHandler, session_id: str, budget: InvocationBudget) -> bool:
    """``handler.handle(session_id, budget)``, run again on a ConflictError up to
    :data:`CONFLICT_RUNS` times while the budget leaves time; the last one raises."""
    for run in range(1, CONFLICT_RUNS + 1):
        try:
            return await handler.handle(session_id, budget)
        except ConflictError as exc:
            pause = random.uniform(_PAUSE_S, 2 * _PAUSE_S) * 2 ** (run - 1)
            left = budget.remaining()
            # A run again past the deadline's margin stops at its first boundary and hands the
            # session on with a continuation, as any invocation does.
            out_of_time = left is not None and left < pause
            if run == CONFLICT_RUNS or budget.requested_stop() is not None or out_of_time:
                raise
            log.warning(
                "wake for session %s met a store conflict (%s); running it again from fresh "
                "reads (run %d of %d)",
                session_id,
                exc,
                run + 1,
                CONFLICT_RUNS,
            )
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
