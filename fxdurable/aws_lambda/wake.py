"""The wake function: SQS delivers wakes, each woken session runs until rest or deadline.

Per invocation: the records are grouped by session (:mod:`fxdurable.aws_lambda.batch`) and
the sessions run side by side on one event loop, each with an
:class:`~fxdurable.runtime.budget.InvocationBudget` ending at the invocation's remaining time
(``context.get_remaining_time_in_millis()``). At every step boundary a session stops once no
more than ``FXD_LAMBDA_MARGIN_S`` is left, which is at least the longest model call or tool
plus the hand-off, so no step starts that cannot finish: it commits, enqueues its
continuation on SQS, lets the lease go and the function returns. A session that could not be
run (a store fault, a bug) fails its records only (``batchItemFailures``), so SQS delivers
them again after the visibility timeout and the rest of the batch is done with. A store
conflict is not such a failure: the wake runs again in the invocation, from fresh reads
(:mod:`fxdurable.runtime.wake_conflicts`), and one that still conflicts is passed on as a
fresh wake, so conflicts never count a message towards the dead-letter queue.

A killed invocation (its timeout, out of memory, a SIGKILL) runs no cleanup: its message
comes back after the visibility timeout (at least 6x the function's timeout, so well after
the lease TTL has let the lease expire), and the next invocation takes the lease over and
resolves the call in flight by its replay policy (an unsafe one is ``outcome_unknown``). A
wake that arrives while the lease is still live is dropped, as everywhere (the holder's
release re-checks for work); if the holder was killed, the scan function wakes the session
once its lease has expired.

A store away for longer than a session's lease stops its run before the lease expires; a sync
tool still inside its call at the run's stop deadline ends the sandbox's runtime (status 75,
docs/leases.md), so its effect cannot land after another invocation takes the session over;
the invocation fails and SQS delivers its batch again.

The warm state (event loop, store, SQS client, agents, the
:class:`~fxdurable.runtime.worker.WakeHandler` and its conversation cache) lives in a module
global for the life of the sandbox: a warm invocation opens nothing. Cold start, measured on
the development machine (``python -m bench.lambda_cold_start``, median of 7): importing
``handlers.wake_lambda`` 191 ms, and with the first invocation's build (store, SQS client,
agents) 279 ms.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fxdurable.aws_lambda.batch import SqsWake, batch_response, read_batch
from fxdurable.aws_lambda.config import LambdaConfig, app_dir
from fxdurable.aws_lambda.sandbox import LambdaContext, remaining_s, sandbox_identity, warm_handler
from fxdurable.aws_lambda.secrets import secrets_from_env
from fxdurable.backends import open_queue, open_store
from fxdurable.core import tracecontext
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.crash import check_crash_at
from fxdurable.core.journal import Journal
from fxdurable.errors import ConfigurationError, ConflictError
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.models import aclose_loaded_clients
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.wake_conflicts import CONFLICT_HAND_ONS, handed_on_reason, handle_wake
from fxdurable.runtime.worker import WakeHandler, WorkerSettings

__all__ = ["WakeFunction", "handler"]

log = logging.getLogger("fxdurable.lambda")


class WakeFunction:
    """One sandbox's warm state and the SQS event handler over it."""

    def __init__(
        self,
        config: LambdaConfig,
        agents: Sequence[Agent],
        *,
        settings: WorkerSettings | None = None,
    ) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.store = open_store(config.store_url)
        try:
            self.queue = open_queue(config.queue_url)
            clock = SystemClock()
            self.handler = WakeHandler(
                Journal(self.store, clock, RandomIds()),
                self.queue,
                {a.name: a for a in agents},
                clock,
                settings or WorkerSettings.from_env(),
                identity=sandbox_identity(),
            )
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_env(cls) -> WakeFunction:
        check_crash_at()  # at cold start, not in the invocation that reaches the point
        secrets_from_env()  # before the agents load: their model clients read the keys
        config = LambdaConfig.from_env()
        spec = os.environ.get("FXD_AGENTS")
        if not spec:
            raise ConfigurationError(
                "the wake function needs FXD_AGENTS (module:attribute naming your agents) in "
                "its environment (infra/template.yaml sets it)"
            )
        agents = load_agents(spec, app_dir=app_dir())
        announce_model_endpoints(agents, process="fxdurable wake function (cold start)")
        return cls(config, agents)

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        return self.loop.run_until_complete(self.handle(event, remaining_s(context)))

    async def handle(self, event: Mapping[str, Any], remaining: float) -> dict[str, Any]:
        """Run every session the batch wakes; ``remaining`` is the invocation's time left."""
        by_session, failed = read_batch(event)
        # One deadline for all: budgets made now, before any session runs.
        budgets = {
            s: InvocationBudget(remaining, margin_s=self.config.margin_s) for s in by_session
        }
        sessions = list(by_session)
        outcomes = await asyncio.gather(
            *(self._wake(s, by_session[s], budgets[s], remaining) for s in sessions)
        )
        for session_id, ok in zip(sessions, outcomes, strict=True):
            if not ok:
                failed.extend(w.message_id for w in by_session[session_id])
        return batch_response(failed)

    async def _wake(
        self, session_id: str, wakes: list[SqsWake], budget: InvocationBudget, remaining: float
    ) -> bool:
        """True when the session's records are done with (delete them)."""
        first = wakes[0]
        if remaining <= self.config.margin_s:
            # Not even one step would fit: hand the wake on rather than overrun the timeout.
            log.warning(
                "%.1fs left is within FXD_LAMBDA_MARGIN_S=%gs: wake for %s passed on (raise "
                "the function's timeout above the margin)",
                remaining,
                self.config.margin_s,
                session_id,
            )
            try:
                await self.queue.enqueue(session_id, reason=f"deferred ({first.reason})")
            except Exception as exc:
                log.warning("could not pass the wake for %s on: %s", session_id, exc)
                return False
            return True
        try:
            with tracecontext.handling_wake(first.trace_parent):
                await handle_wake(self.handler, session_id, budget)
        except ConflictError as exc:
            # Still conflicting after runs from fresh reads: hand it on as a fresh wake rather
            # than fail the records, whose receive count leads to the dead-letter queue; a
            # conflict that outlives the hand-ons is failed there after all.
            reason = handed_on_reason(first.reason)
            if reason is None:
                log.error(
                    "wake for session %s still conflicts (%s) after %d fresh wakes; failed to "
                    "the queue (its redeliveries lead to the dead-letter queue)",
                    session_id,
                    exc,
                    CONFLICT_HAND_ONS,
                )
                return False
            log.warning("wake for session %s still conflicts (%s); passed on", session_id, exc)
            try:
                await self.queue.enqueue(session_id, reason=reason)
            except Exception as send_exc:
                log.warning("could not pass the wake for %s on: %s", session_id, send_exc)
                return False
            return True
        except Exception:
            log.exception(
                "wake for session %s failed (receive count %d); SQS delivers it again",
                session_id,
                max(w.receive_count for w in wakes),
            )
            return False
        return True

    def close(self) -> None:
        """Close the queue client, the loop and the store (tests and benchmarks; a sandbox
        is frozen and discarded by Lambda instead)."""
        if not self.loop.is_closed():
            queue = getattr(self, "queue", None)
            self.loop.run_until_complete(aclose_loaded_clients())
            if queue is not None:
                self.loop.run_until_complete(queue.aclose())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()
        self.store.close()


#: The Lambda entry point: the template's ``Handler: fxdurable.aws_lambda.wake.handler``.
handler = warm_handler(WakeFunction.from_env)
