"""The scan function: on a schedule (every minute), wake what no wake will reach.

No Lambda lives long enough to run the worker's periodic reconciliation scan, so this
function is that scan, once per invocation: every session with unsettled work and no live
lease gets a wake on SQS. That recovers a session whose invocation was killed holding its
lease (once the lease expires; its own message comes back only after the visibility timeout),
a wake dropped because it came while a since-killed holder's lease was still live, and a wake
lost to a queue outage after its work was admitted. A session nobody holds whose last event is
younger than ``FXD_SCAN_QUIET_S`` (30 s) is skipped: its wake is most likely still queued.
Duplicates are harmless: the store decides what is done. Each invocation also runs the
retention sweep (docs/erasure.md "Retention"): idle sessions past their agent's
``retention_days`` are erased, from what the store records (no agent code is needed).

It imports no agent, model or HTTP code: only the store, the queue and the scan's query.
Cold start, measured on the development machine (``python -m bench.lambda_cold_start``,
median of 7): importing ``handlers.scan_lambda`` 92 ms, with the store and SQS client 215 ms.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from fxdurable.aws_lambda.config import LambdaConfig
from fxdurable.aws_lambda.sandbox import LambdaContext, warm_handler
from fxdurable.backends import open_queue, open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.crash import check_crash_at
from fxdurable.core.journal import Journal
from fxdurable.errors import QueueUnavailableError
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.runtime.retention import sweep_retention
from fxdurable.runtime.worker import WorkerSettings

__all__ = ["ScanFunction", "handler"]

log = logging.getLogger("fxdurable.lambda")


class ScanFunction:
    """One sandbox's store and queue client, and the scan over them."""

    def __init__(self, config: LambdaConfig, *, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.loop = asyncio.new_event_loop()
        self.store = open_store(config.store_url)
        try:
            self.queue = open_queue(config.queue_url)
        except BaseException:
            self.store.close()
            self.loop.close()
            raise

    @classmethod
    def from_env(cls) -> ScanFunction:
        check_crash_at()  # at cold start
        return cls(LambdaConfig.from_env(), quiet_s=WorkerSettings.from_env().scan_quiet_s)

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, int]:
        return self.loop.run_until_complete(self.scan())

    async def scan(self) -> dict[str, int]:
        """Wake every orphaned session, then erase every idle session past its retention
        (:mod:`fxdurable.runtime.retention`); ``{"orphaned": n, "woken": m, "expired": e}``.
        Raises
        :class:`~fxdurable.errors.QueueUnavailableError` when some wake could not be sent
        (after sending the others), so the function's error metric shows it; the next scan
        tries again."""
        now = time.time()
        sessions = await asyncio.to_thread(
            self.store.read, lambda v: orphaned_sessions(v, now=now, quiet_s=self.quiet_s)
        )
        sent = await asyncio.gather(
            *(self.queue.enqueue(s, reason="scan") for s in sessions), return_exceptions=True
        )
        failed = [(s, r) for s, r in zip(sessions, sent, strict=True) if r is not None]
        for session_id, error in failed:
            log.warning("scan: could not wake %s: %s", session_id, error)
        swept = await asyncio.to_thread(
            sweep_retention, Journal(self.store, SystemClock(), RandomIds())
        )
        summary = {
            "orphaned": len(sessions),
            "woken": len(sessions) - len(failed),
            "expired": len(swept.erased),
        }
        log.info("scan: %s", summary)
        if failed:
            raise QueueUnavailableError(
                f"the scan could not wake {len(failed)} of {len(sessions)} sessions; "
                "the next scan tries again",
                url=self.queue.url,
            )
        return summary

    def close(self) -> None:
        self.loop.run_until_complete(self.queue.aclose())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
        self.store.close()


#: The Lambda entry point: the template's ``Handler: fxdurable.aws_lambda.scan.handler``.
handler = warm_handler(ScanFunction.from_env)
