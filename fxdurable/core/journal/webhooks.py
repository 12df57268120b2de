"""Settlement webhooks: owed from the settle commit (``Turns.settle(webhook=True)``) until
delivered or abandoned, on the session (``SessionRecord.webhooks``). Delivery is the worker's
(``runtime/webhooks.py``); these transitions record what it found, fenced by its lease, so
a worker that lost the session cannot record a delivery the new owner repeats or skips.

At least once: a crash between the receiver's answer and ``webhook_delivered`` sends it
again, with the same delivery id (the submission's) for the receiver to deduplicate.
"""

from __future__ import annotations

from dataclasses import replace

from fxdurable.core.events import EventType, WebhookSettled
from fxdurable.core.records import PendingWebhook
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Tx

from ._base import Fence, Transitions
from ._scope import _SessionScope


class Webhooks(Transitions):
    def webhook_delivered(self, fence: Fence, submission_id: str, *, status: int) -> None:
        """The receiver answered ``status`` (a 2xx): the webhook is no longer owed. A second
        record of the same delivery (a retried commit) finds nothing owed and does nothing."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            owed = _owed(scope, submission_id)
            if owed is None:
                return
            settled = WebhookSettled(
                submission=submission_id, attempts=owed.attempts + 1, status=status
            )
            scope.emit(EventType.WEBHOOK_DELIVERED, settled, turn_id=submission_id)
            _forget(tx, scope, submission_id)

        self._transition(fence, body)

    def webhook_failed(
        self, fence: Fence, submission_id: str, *, error: str, retry_at: float | None
    ) -> None:
        """An attempt failed with ``error``: try again from ``retry_at`` (journal clock), or,
        with None, abandon the webhook (``webhook.abandoned``): no more attempts are made."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            owed = _owed(scope, submission_id)
            if owed is None:
                return
            attempts = owed.attempts + 1
            if retry_at is not None:
                again = replace(owed, attempts=attempts, next_at=retry_at)
                webhooks = tuple(
                    again if w.submission_id == submission_id else w for w in scope.session.webhooks
                )
                scope.session = replace(scope.session, webhooks=webhooks)
                return
            settled = WebhookSettled(submission=submission_id, attempts=attempts, error=error)
            scope.emit(EventType.WEBHOOK_ABANDONED, settled, turn_id=submission_id)
            _forget(tx, scope, submission_id)

        self._transition(fence, body)


def _owed(scope: _SessionScope, submission_id: str) -> PendingWebhook | None:
    return next((w for w in scope.session.webhooks if w.submission_id == submission_id), None)


def _forget(tx: Tx, scope: _SessionScope, submission_id: str) -> None:
    """Drop the owed webhook; the session rests once nothing else is owed or unsettled."""
    rest = tuple(w for w in scope.session.webhooks if w.submission_id != submission_id)
    scope.session = replace(scope.session, webhooks=rest)
    if not rest and not tx.unsettled_submissions(scope.session.id):
        scope.set_status(SessionStatus.IDLE)
