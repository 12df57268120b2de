"""Settlement webhooks: ``Agent(webhook=fx.Webhook(url, secret))`` POSTs each submission's
end (completed, failed or aborted) to one URL the deployment chose, signed, at least once.

The webhook is owed from the settlement's own commit (``SessionRecord.webhooks``), so a
crash after it still delivers: the worker holding the session sends what is due before it
lets go, and records the answer through its lease (``core/journal/webhooks.py``); a wake,
or the scan, brings the worker back for a retry that is not due yet. A crash between the
receiver's answer and that record sends it again: each POST carries the same
``X-Fxdurable-Delivery`` (the submission's id) for the receiver to deduplicate.

The URL is the agent's, never a client's: a URL taken from a request would let any caller
make the workers POST into the deployment's own network.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fxdurable.core.clock import Clock
from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Fence, Journal
from fxdurable.core.records import PendingWebhook, SessionRecord, SubmissionRecord
from fxdurable.errors import ConfigurationError, WebhookSignatureError
from fxdurable.runtime.crossing import durable

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "Webhook",
    "deliver_due",
    "next_due",
    "retry_at",
    "sign_webhook",
    "turn_end_body",
    "verify_webhook",
]

log = logging.getLogger("fxdurable.webhooks")

SIGNATURE_HEADER = "X-Fxdurable-Signature"
DELIVERY_HEADER = "X-Fxdurable-Delivery"
# How old a signed timestamp ``verify_webhook`` accepts by default: a replayed body is
# refused after this long, a receiver's clock may be this far behind.
TOLERANCE_S = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Webhook:
    """Where and how a settlement webhook goes.

    ``secret`` signs every body (HMAC-SHA256, ``X-Fxdurable-Signature: t=<unix>,v1=<hex>``;
    check it with :func:`verify_webhook`). A delivery is a 2xx answer within ``timeout_s``;
    anything else is retried, ``backoff_s`` doubling up to ``max_backoff_s``, until
    ``attempts`` failed: then it is abandoned (``webhook.abandoned`` on the session's events).
    Redirects are not followed.
    """

    url: str
    secret: str = field(repr=False)
    attempts: int = 8
    backoff_s: float = 2.0
    max_backoff_s: float = 600.0
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"webhook url must be http(s)://host/...: {parts.scheme}://")
        if len(self.secret) < 16:
            raise ConfigurationError("webhook secret must be at least 16 characters")
        if self.attempts < 1:
            raise ConfigurationError("webhook attempts must be at least 1")
        if not 0 < self.backoff_s <= self.max_backoff_s:
            raise ConfigurationError("webhook backoff_s must be > 0 and ≤ max_backoff_s")
        if self.timeout_s <= 0:
            raise ConfigurationError("webhook timeout_s must be > 0")


def turn_end_body(session_id: str, sub: SubmissionRecord) -> bytes:
    """The POSTed JSON: what a ``turn_end`` line says about the settled submission."""
    body: dict[str, Any] = {
        "type": "turn_end",
        "session": session_id,
        "submission": sub.id,
        "request_id": sub.request_id,
        "outcome": str(sub.status),
        "text": sub.result_text,
        "settled_at": sub.settled_at,
    }
    if sub.output is not None:
        body["output"] = json.loads(sub.output)
    if sub.error is not None:
        body["error"] = {"code": sub.error.code, "message": sub.error.message}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def sign_webhook(secret: str, body: bytes, at: float) -> str:
    """The signature header's value for ``body`` sent at ``at`` (unix seconds)."""
    stamp = str(int(at))
    digest = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256)
    return f"t={stamp},v1={digest.hexdigest()}"


def verify_webhook(
    body: bytes,
    signature: str,
    secret: str,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a received webhook's ``X-Fxdurable-Signature`` and return its JSON body.
    Raises :class:`~fxdurable.errors.WebhookSignatureError` for a signature that does not
    match, is malformed, or is older than ``tolerance_s`` (a replay)."""
    fields = dict(part.split("=", 1) for part in signature.split(",") if "=" in part)
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if not stamp.isdigit() or not given:
        raise WebhookSignatureError("malformed signature header")
    expected = sign_webhook(secret, body, float(stamp)).rsplit("v1=", 1)[1]
    if not hmac.compare_digest(expected, given):
        raise WebhookSignatureError("signature does not match the body")
    age = (time.time() if now is None else now) - int(stamp)
    if abs(age) > tolerance_s:
        raise WebhookSignatureError(f"signature timestamp is {age:.0f}s off (a replay?)")
    decoded: dict[str, Any] = json.loads(body)
    return decoded


def retry_at(webhook: Webhook | None, owed: PendingWebhook, now: float) -> float | None:
    """After a failed attempt: when to try again, or None to abandon (the attempts are
    spent, or the agent no longer has a webhook). The one retry decision; no I/O."""
    failed = owed.attempts + 1
    if webhook is None or failed >= webhook.attempts:
        return None
    backoff_s: float = webhook.backoff_s * 2.0 ** (failed - 1)
    return now + min(webhook.max_backoff_s, backoff_s)


def next_due(session: SessionRecord) -> float | None:
    """When the session's next owed webhook may be tried (None: none is owed)."""
    return min((w.next_at for w in session.webhooks), default=None)


async def post(webhook: Webhook, body: bytes, delivery: str, at: float) -> tuple[int | None, str]:
    """One attempt: the receiver's status (None when none came) and what failed, if it did.
    The error names the failure, never the URL (it may carry a token)."""
    import httpx  # here: an agent without a webhook (the demo) never loads it

    headers: Mapping[str, str] = {
        "content-type": "application/json",
        "user-agent": "fxdurable-webhook",
        SIGNATURE_HEADER: sign_webhook(webhook.secret, body, at),
        DELIVERY_HEADER: delivery,
    }
    try:
        async with httpx.AsyncClient(timeout=webhook.timeout_s, follow_redirects=False) as client:
            response = await client.post(webhook.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}"


async def deliver_due(
    journal: Journal,
    fence: Fence,
    webhook: Webhook | None,
    session: SessionRecord,
    clock: Clock,
) -> bool:
    """Send each owed webhook that is due, and record its answer through ``fence``; False
    when none was due (nothing recorded). One owed by an agent that no longer has a webhook
    (a redeploy took it away), or whose submission is gone, is abandoned."""
    due = [owed for owed in session.webhooks if owed.next_at <= clock.now()]
    for owed in due:
        sub_id = owed.submission_id
        sub = await durable(journal.read, lambda v, sid=sub_id: v.get_submission(sid))
        if webhook is None or sub is None:
            error = "the agent has no webhook" if webhook is None else "submission gone"
            await durable(journal.webhook_failed, fence, sub_id, error=error, retry_at=None)
            continue
        body = turn_end_body(session.id, sub)
        status, error = await post(webhook, body, sub_id, clock.now())
        crash_point("webhook.after-send")
        if not error:
            assert status is not None
            await durable(journal.webhook_delivered, fence, sub_id, status=status)
            continue
        again = retry_at(webhook, owed, clock.now())
        if again is None:
            log.warning("session %s: webhook for %s abandoned: %s", session.id, sub_id, error)
        await durable(journal.webhook_failed, fence, sub_id, error=error, retry_at=again)
    return bool(due)
