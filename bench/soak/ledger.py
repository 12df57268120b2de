"""The soak's outside world: two fsynced, append-only JSON-lines files in one directory.

- ``effects.jsonl``: one line per effect a tool took, ``{"tool", "policy", "exec", "op",
  "pid", "t"}`` (``exec``: the call's execution id; ``op``: the operation key the model gave
  it, one per step of a prompt's plan), and ``"noop": true`` for an idempotent call that found
  its execution id already applied and took no effect (the downstream deduped it);
- ``calls.jsonl``: one line per execution of any tool as it starts, ``{"tool", "policy",
  "sync", "exec", "op", "hold", "pid", "start"}``: what the fault scheduler reads to know which
  calls are in flight, and the soak's count of executions.

Each line is one ``O_APPEND`` write followed by ``fsync``, so a SIGKILL never tears a line
and every process sees the others' lines in one order.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CALLS",
    "EFFECTS",
    "LedgerEntry",
    "append_json",
    "calls_in_flight",
    "double_effects",
    "read_jsonl",
]

EFFECTS = "effects.jsonl"
CALLS = "calls.jsonl"


def append_json(path: Path, record: dict[str, Any]) -> None:
    """One durable line: a single O_APPEND write, fsynced before returning."""
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line of ``path`` (none when it does not exist yet)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One effect line, typed."""

    tool: str
    policy: str
    execution_id: str
    op: str
    noop: bool = False

    @classmethod
    def parse(cls, record: dict[str, Any]) -> LedgerEntry:
        return cls(
            tool=str(record["tool"]),
            policy=str(record["policy"]),
            execution_id=str(record["exec"]),
            op=str(record["op"]),
            noop=bool(record.get("noop", False)),
        )


def double_effects(entries: Iterable[LedgerEntry]) -> list[str]:
    """The ledger's own verdict, independent of the store: an unsafe operation (its key) that
    took effect more than once, an idempotent execution id applied more than once. One line
    per violation, sorted."""
    entries = [e for e in entries if not e.noop]
    unsafe = Counter(e.op for e in entries if e.policy == "unsafe")
    idempotent = Counter(e.execution_id for e in entries if e.policy == "idempotent")
    problems = [f"unsafe operation {op} took effect {n} times" for op, n in unsafe.items() if n > 1]
    problems += [
        f"idempotent execution {ex} applied {n} times" for ex, n in idempotent.items() if n > 1
    ]
    return sorted(problems)


def calls_in_flight(
    world: Path, *, now: float | None = None, policy: str | None = None, sync: bool | None = None
) -> list[dict[str, Any]]:
    """Calls that started and whose hold has not run out yet (an upper bound: an async call
    cancelled early still counts until its hold would have ended), optionally only those of
    one replay ``policy`` and sync or async kind."""
    now = time.time() if now is None else now
    out = []
    for call in read_jsonl(world / CALLS):
        if policy is not None and call["policy"] != policy:
            continue
        if sync is not None and bool(call["sync"]) != sync:
            continue
        if call["start"] <= now <= call["start"] + call["hold"] + 0.5:
            out.append(call)
    return out
