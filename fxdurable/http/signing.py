"""Signed wake requests: HMAC-SHA256 over a timestamp and the exact body, with a shared secret.

A platform queue, a cron or an SNS subscription calls ``POST /wake`` with the header
``X-Fxd-Signature: t=<unix seconds>,v1=<hex digest of HMAC(secret, "<t>." + body)>``.
A signature older or newer than the window is refused, so a captured request cannot be
replayed later. Within the window a replay only repeats a wake, which is a hint (DESIGN §2):
the worker re-reads the records and finds nothing new to do.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["SIGNATURE_HEADER", "SignatureError", "sign_wake", "verify_wake"]

SIGNATURE_HEADER = "X-Fxd-Signature"


class SignatureError(Exception):
    """The signature is missing, malformed, forged or outside the time window."""


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_wake(secret: str, body: bytes, *, timestamp: float | None = None) -> str:
    """The ``X-Fxd-Signature`` header value for ``body``, signed now (or at ``timestamp``)."""
    t = int(time.time() if timestamp is None else timestamp)
    return f"t={t},v1={_digest(secret, t, body)}"


def verify_wake(
    secret: str, body: bytes, header: str | None, *, window_s: float, now: float | None = None
) -> None:
    """Raise :class:`SignatureError` unless ``header`` signs ``body`` within the window."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    malformed = f"malformed {SIGNATURE_HEADER}: expected 't=<unix seconds>,v1=<hex>'"
    # A signature is ASCII; compare_digest raises TypeError on a str that is not.
    if not header.isascii():
        raise SignatureError(malformed)
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    current = time.time() if now is None else now
    try:
        timestamp = int(parts["t"])
        given = parts["v1"]
        # OverflowError: a timestamp of hundreds of digits does not fit a float.
        drift = current - timestamp
    except (KeyError, ValueError, OverflowError):
        raise SignatureError(malformed) from None
    if abs(drift) > window_s:
        raise SignatureError(
            f"signature timestamp is {drift:+.0f}s from now; the window is {window_s:g}s"
        )
    if not hmac.compare_digest(_digest(secret, timestamp, body), given):
        raise SignatureError("signature does not match the body")
