"""Provider failures translated into fxdurable's model errors, in this one module.

* an HTTP status (with the error body and the ``Retry-After`` headers) -> :func:`status_error`
* an httpx transport exception or the total deadline -> :func:`transport_error`
* an error payload inside a 200 stream -> :func:`stream_error`

What callers may rely on: retryable failures are :class:`ModelRetryableError` (with the
provider's ``retry_after_s`` hint when it gave one), a conversation that no longer fits is
:class:`ContextLengthError`, anything else is :class:`ModelError`. No message ever contains
the API key: provider text is redacted before it is quoted, and headers are never quoted.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from fxdurable.errors import (
    ContextLengthError,
    ModelError,
    ModelOverloadedError,
    ModelRetryableError,
)

__all__ = [
    "ERROR_BODY_LIMIT",
    "ProviderError",
    "is_context_length",
    "is_request_too_large",
    "parse_error_body",
    "parse_retry_after",
    "redact",
    "status_error",
    "stream_error",
    "transport_error",
]

ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error body read, at most
_QUOTE_LIMIT = 500  # characters of provider text quoted in a message

# Statuses worth retrying: the OpenAI and Anthropic SDKs retry the same set (408 request
# timeout, 409 lock conflict, 429 rate limit, 5xx and Anthropic's 529 "overloaded").
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "server_error"})
# The transient failures that say "this provider cannot take the request now" (rate limit,
# unavailable, Anthropic's 529 overloaded): a Fallback model switches on these at once.
_OVERLOAD_STATUS = frozenset({429, 503, 529})
_OVERLOAD_TYPES = frozenset({"overloaded_error", "rate_limit_error", "rate_limit_exceeded"})
# Errors that say the request itself is wrong (Anthropic's and OpenAI's types and codes): a
# mid-stream error of these kinds is not retried.
_PERMANENT_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "billing_error",
        "invalid_api_key",
        "model_not_found",
    }
)
_LIMIT_REQUESTED = re.compile(r"Limit:?\s*([\d,]+),\s*Requested:?\s*([\d,]+)", re.IGNORECASE)
_CONTEXT_MARKERS = (
    "context_length_exceeded",  # OpenAI's error code
    "context length",  # OpenAI, vLLM: "maximum context length is 8192 tokens"
    "maximum context",
    "context window",
    "prompt is too long",  # Anthropic
    "input is too long",
)


@dataclass(frozen=True, slots=True)
class ProviderError:
    """What a provider said went wrong, as far as its error body could be understood."""

    message: str
    type: str | None = None
    code: str | None = None


def parse_error_body(body: str | bytes | object) -> ProviderError:
    """Understand the error bodies of OpenAI, Anthropic, vLLM, Ollama, LiteLLM and plain text.

    ``body`` is raw text, or an already decoded JSON payload.
    """
    payload: object = body
    if isinstance(body, bytes):
        payload = body.decode("utf-8", errors="replace")
    if isinstance(payload, str):
        text = payload.strip()
        try:
            payload = json.loads(text)
        except ValueError:
            return ProviderError(message=" ".join(text.split()))
    if isinstance(payload, list) and payload:
        payload = payload[0]  # some gateways wrap the error in a list
    if not isinstance(payload, dict):
        return ProviderError(message=str(payload))
    error: object = payload.get("error", payload)
    if isinstance(error, str):  # Ollama: {"error": "model 'x' not found"}
        return ProviderError(message=error, type=_opt_str(payload.get("type")))
    if not isinstance(error, dict):
        return ProviderError(message=json.dumps(payload))
    message = error.get("message")
    return ProviderError(
        message=message if isinstance(message, str) else json.dumps(error),
        type=_opt_str(error.get("type")),
        code=_opt_str(error.get("code")),
    )


def is_context_length(error: ProviderError) -> bool:
    haystack = " ".join(x for x in (error.code, error.type, error.message) if x).lower()
    return any(marker in haystack for marker in _CONTEXT_MARKERS)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait a provider asked for: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date). ``None`` when absent or unreadable; never negative."""
    h = httpx.Headers(headers)
    millis = h.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = h.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def redact(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "***")
    return text


def status_error(
    *,
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: str,
    url: str,
    secret: str | None,
    key_env: str,
    now: float | None = None,
) -> ModelError:
    """The error for a non-2xx response; ``body`` is the (capped) error body text."""
    error = parse_error_body(body)
    said = _quote(error.message, secret) or "(no error message)"
    permanent = _permanent(provider, status, error, said, where=f"HTTP {status}")
    if permanent is not None:
        return permanent
    if _transient(status, error):
        retry_after = parse_retry_after(headers, now=now)
        what = {
            429: "rate-limited the request",
            529: "is overloaded",
            408: "timed out the request",
        }.get(status, "failed")
        hint = f"; retry after {retry_after:g}s" if retry_after is not None else ""
        kind = ModelOverloadedError if _overloaded(status, error) else ModelRetryableError
        return kind(f"{provider} {what} (HTTP {status}): {said}{hint}", retry_after_s=retry_after)
    if status == 401:
        return ModelError(
            f"{provider} rejected the credentials (HTTP 401): {said}; "
            f"check the API key (environment variable {key_env})"
        )
    if status == 403:
        return ModelError(f"{provider} refused access (HTTP 403): {said}")
    if status == 404:
        return ModelError(
            f"{provider} returned HTTP 404 for {url}: {said}; check the model name and base URL"
        )
    return ModelError(f"{provider} rejected the request (HTTP {status}): {said}")


def stream_error(provider: str, payload: object, *, secret: str | None) -> ModelError:
    """An error the provider sent inside a stream that had started with a 200 (a ``data:``
    event with an ``error`` object, or an ``error`` event), before or after its finish.

    It is classified by the same table as an HTTP status, from the status the payload carries
    (OpenRouter and LiteLLM put it in ``code``) or else from its ``type``/``code``: 429, 5xx,
    overloaded and unknown errors are transient (the request itself was accepted), 400-class
    ones permanent, a conversation too long is :class:`ContextLengthError`.
    """
    error = parse_error_body(payload)
    said = _quote(error.message, secret) or "(no error message)"
    kind = f" [{error.type or error.code}]" if error.type or error.code else ""
    status = _status_of(error)
    permanent = _permanent(provider, status, error, said, where=f"mid-stream{kind}")
    if permanent is not None:
        return permanent
    if status is None or _transient(status, error):
        transient = ModelOverloadedError if _overloaded(status, error) else ModelRetryableError
        return transient(f"{provider} sent an error mid-stream{kind}: {said}")
    return ModelError(f"{provider} failed the request mid-stream{kind}: {said}")


def is_request_too_large(error: ProviderError) -> bool:
    """The request alone exceeds a per-minute token limit, so no wait can let it through:
    OpenAI's 429 and Groq's 413 "Request too large for … on tokens per min(ute) (TPM): Limit
    L, Requested R", where R > L. (A "Rate limit reached … Used U, Requested R" passes once
    the minute has gone by: that one is transient.)"""
    message = error.message.lower()
    if "request too large" in message and "per min" in message:
        return True
    numbers = _LIMIT_REQUESTED.search(error.message)
    if numbers is None or "used" in message:
        return False
    limit, requested = (int(n.replace(",", "")) for n in numbers.groups())
    return requested > limit


def _permanent(
    provider: str, status: int | None, error: ProviderError, said: str, *, where: str
) -> ModelError | None:
    """The failures no retry of this request can fix, whatever the status says."""
    if is_context_length(error) and status in (None, 400, 413, 422):
        return ContextLengthError(
            f"{provider}: the conversation does not fit the model's context window "
            f"({where}): {said}"
        )
    if is_request_too_large(error):
        # Compaction can make the request fit; waiting cannot.
        return ContextLengthError(
            f"{provider}: the request alone exceeds the tokens-per-minute limit, so it cannot "
            f"succeed as it is ({where}): {said}; reduce the conversation or max_tokens, or "
            "raise the account's limit"
        )
    if status == 413:  # the request body itself is too large: compaction helps here too
        return ContextLengthError(f"{provider}: the request is too large ({where}): {said}")
    if "insufficient_quota" in (error.code, error.type):
        # OpenAI sends this as a 429, but waiting does not refill an account
        return ModelError(
            f"{provider} refused the request: the account is out of quota ({where}): {said}"
        )
    if status is None and (error.type in _PERMANENT_TYPES or error.code in _PERMANENT_TYPES):
        return ModelError(f"{provider} rejected the request ({where}): {said}")
    return None


def _transient(status: int, error: ProviderError) -> bool:
    return status in _RETRYABLE_STATUS or status >= 500 or error.type in _RETRYABLE_TYPES


def _overloaded(status: int | None, error: ProviderError) -> bool:
    return (
        status in _OVERLOAD_STATUS or error.type in _OVERLOAD_TYPES or error.code in _OVERLOAD_TYPES
    )


def _status_of(error: ProviderError) -> int | None:
    """The HTTP status a mid-stream error carries in its ``code``, if it is one."""
    if error.code is not None and error.code.isdigit() and 100 <= int(error.code) <= 599:
        return int(error.code)
    return None


def transport_error(
    provider: str, exc: BaseException, *, url: str, total_s: float, secret: str | None = None
) -> ModelError:
    """The error for an httpx exception, or for the total deadline (a ``TimeoutError``)."""
    if isinstance(exc, TimeoutError):
        return ModelRetryableError(
            f"{provider} did not finish answering within the total timeout of {total_s:g}s"
        )
    # An exception about a header may quote the header: never let it quote the key.
    detail = redact(str(exc) or type(exc).__name__, secret)
    if isinstance(exc, httpx.ConnectTimeout):
        return ModelRetryableError(f"could not connect to {provider} at {url}: connect timeout")
    if isinstance(exc, httpx.ConnectError):
        return ModelRetryableError(f"could not connect to {provider} at {url}: {detail}")
    if isinstance(exc, httpx.ReadTimeout):
        return ModelRetryableError(f"{provider} stopped sending data (read timeout)")
    if isinstance(exc, httpx.TimeoutException):
        return ModelRetryableError(f"{provider} request timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.NetworkError | httpx.ProxyError):
        return ModelRetryableError(f"the connection to {provider} broke: {detail}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return ModelError(f"cannot call {provider} at {url!r}: {detail}; check the base URL")
    return ModelError(f"calling {provider} failed: {type(exc).__name__}: {detail}")


def _quote(text: str, secret: str | None) -> str:
    text = redact(" ".join(text.split()), secret)
    if len(text) > _QUOTE_LIMIT:
        text = text[:_QUOTE_LIMIT] + "…"
    return text


def _opt_str(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)
