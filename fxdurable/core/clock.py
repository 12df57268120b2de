"""Time and identity are injected so tests can drive them (no ``time.time()`` in the core)."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Protocol

__all__ = ["Clock", "IdSource", "RandomIds", "SystemClock", "execution_id", "tool_task_id"]


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (stored in records, compared across hosts)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class IdSource(Protocol):
    def new_id(self, prefix: str) -> str: ...


class RandomIds:
    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:20]}"


def tool_task_id(turn_id: str, round_: int, index: int) -> str:
    """Position, not timing, names a tool task (DESIGN §9: completion order is not identity)."""
    return f"{turn_id}/r{round_}/t{index}"


def execution_id(task_id: str) -> str:
    """Stable across every retry of one call: the downstream idempotency key."""
    return "x" + hashlib.sha256(task_id.encode()).hexdigest()[:31]
