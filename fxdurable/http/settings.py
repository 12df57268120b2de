"""Limits and timeouts of the HTTP API, each with a default a newcomer need not change."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from fxdurable.errors import ConfigurationError

__all__ = ["HTTP_MODES", "HttpSettings"]

HTTP_MODES = ("stream", "receipt")
# API Gateway cuts every integration off at 30 s (29 s for an HTTP API's default): a long
# poll must answer before that, with time left for the function's own overhead.
MAX_LONG_POLL_S = 28.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    max_body_bytes: int = 256 * 1024
    # A request body must arrive whole within this long after its headers (408 otherwise), so
    # a client that stalls or trickles it cannot hold a connection open indefinitely. The
    # server and the proxy in front bound the headers (README, "Timeouts").
    body_timeout_s: float = 30.0
    max_prompt_chars: int = 100_000
    # A reconnecting stream (GET /chat) ends after this long with no new line; the client
    # reconnects from its last cursor. Keepalive lines keep proxies from cutting it sooner.
    idle_timeout_s: float = 60.0
    keepalive_s: float = 15.0
    # POST /chat streams until its turn ends, but no longer than this: then it ends with a
    # ``stream_end`` line and the client goes on with GET /chat from its cursor.
    max_stream_s: float = 900.0
    # How often a stream looks for new events while it waits (the store is the only truth).
    poll_min_s: float = 0.01
    poll_max_s: float = 0.2
    # POST /wake: the shared secret (None: the route answers 404) and the replay window.
    wake_secret: str | None = None
    wake_window_s: float = 300.0
    # How long one /wake may run the session before handing the rest to the queue.
    wake_budget_s: float | None = None
    # "stream": POST /chat streams its turn and GET /chat streams from a cursor. "receipt"
    # (behind API Gateway, which cannot stream from a Python Lambda): POST /chat admits and
    # answers 202 with the cursor to read from, and GET /chat long-polls for the lines after a
    # cursor, answering as soon as there are some or after ``long_poll_s``.
    mode: Literal["stream", "receipt"] = "stream"
    long_poll_s: float = 20.0
    # ``--dev`` (no authentication, on one's own machine): ``GET /`` redirects to the console,
    # and the caller also sees sessions made in process (owner None), such as ``make demo``'s
    # ``engineer``, by their plain id. Never with real principals: an unowned session would
    # be everybody's.
    dev: bool = False

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_prompt_chars"):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"HttpSettings.{name} must be positive")
        for name in (
            "body_timeout_s",
            "idle_timeout_s",
            "keepalive_s",
            "max_stream_s",
            "poll_min_s",
            "wake_window_s",
            "long_poll_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"HttpSettings.{name} must be positive")
        if self.poll_max_s < self.poll_min_s:
            raise ConfigurationError("HttpSettings.poll_max_s must be at least poll_min_s")
        if self.mode not in HTTP_MODES:
            raise ConfigurationError(f"the HTTP mode is 'stream' or 'receipt', not {self.mode!r}")
        if self.long_poll_s > MAX_LONG_POLL_S:
            raise ConfigurationError(
                f"a long poll of {self.long_poll_s:g} s would outlast API Gateway's 30 s "
                f"limit; keep it at most {MAX_LONG_POLL_S:g} s"
            )
        if self.wake_secret is not None and len(self.wake_secret) < 16:
            raise ConfigurationError("the wake secret must be at least 16 characters")

    @classmethod
    def from_env(cls) -> HttpSettings:
        """``FXD_WAKE_SECRET``, ``FXD_WAKE_BUDGET_S``, ``FXD_HTTP_IDLE_TIMEOUT_S``,
        ``FXD_HTTP_MAX_BODY_BYTES``, ``FXD_HTTP_BODY_TIMEOUT_S``, ``FXD_HTTP_MODE``
        (``stream`` or ``receipt``), ``FXD_HTTP_LONG_POLL_S``; the rest keep their
        defaults."""
        env = os.environ
        mode = env.get("FXD_HTTP_MODE") or "stream"
        if mode not in HTTP_MODES:
            raise ConfigurationError(f"FXD_HTTP_MODE is 'stream' or 'receipt', not {mode!r}")
        try:
            return cls(
                mode="receipt" if mode == "receipt" else "stream",
                long_poll_s=_float(env.get("FXD_HTTP_LONG_POLL_S")) or 20.0,
                wake_secret=env.get("FXD_WAKE_SECRET") or None,
                wake_budget_s=_float(env.get("FXD_WAKE_BUDGET_S")),
                idle_timeout_s=_float(env.get("FXD_HTTP_IDLE_TIMEOUT_S")) or 60.0,
                max_body_bytes=int(env.get("FXD_HTTP_MAX_BODY_BYTES") or 256 * 1024),
                body_timeout_s=_float(env.get("FXD_HTTP_BODY_TIMEOUT_S")) or 30.0,
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad HTTP setting in the environment: {exc}") from exc


def _float(value: str | None) -> float | None:
    return float(value) if value else None
