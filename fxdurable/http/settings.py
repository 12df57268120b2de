"""Limits and timeouts of the HTTP API, each with a default a newcomer need not change."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError

__all__ = ["HttpSettings"]


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
        ):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"HttpSettings.{name} must be positive")
        if self.poll_max_s < self.poll_min_s:
            raise ConfigurationError("HttpSettings.poll_max_s must be at least poll_min_s")
        if self.wake_secret is not None and len(self.wake_secret) < 16:
            raise ConfigurationError("the wake secret must be at least 16 characters")

    @classmethod
    def from_env(cls) -> HttpSettings:
        """``FXD_WAKE_SECRET``, ``FXD_WAKE_BUDGET_S``, ``FXD_HTTP_IDLE_TIMEOUT_S``,
        ``FXD_HTTP_MAX_BODY_BYTES``, ``FXD_HTTP_BODY_TIMEOUT_S``; the rest keep their
        defaults."""
        env = os.environ
        try:
            return cls(
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
