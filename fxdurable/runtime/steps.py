"""Durable steps of a tool call (``ctx.step``): each step's value is recorded once, keyed by
the call and the step's name, and served from its record when the call re-executes.

A durable tool (``@tool(durable=True)``) interrupted by a crash is not left
``outcome_unknown``: recovery runs it again, and every step that had completed returns its
recorded value without calling its function (a ``provision_workspace`` that created the tenant
does not create it again). A crash *inside* a step, after its function ran and before its
record committed, runs that step again: like any at-least-once step, it must be idempotent or
check the world first (look the tenant up before creating it). The code between steps runs
again on every re-execution, so effects belong inside steps.

Values go through JSON on the first run too, so a step returns the same value whether it ran
or was replayed (a tuple comes back a list, dict keys as strings).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fxdurable.core.codec import dumps
from fxdurable.errors import StepError
from fxdurable.runtime.leases import run_sync

__all__ = ["StepFn", "StepLog", "StepRecorder"]

StepFn = Callable[[], Any]  # sync, async, or sync returning an awaitable
# Commits a step's JSON value under its name: a fenced journal transition.
StepRecorder = Callable[[str, str], Awaitable[None]]


class StepLog:
    """The steps of one run of one durable tool call."""

    def __init__(
        self,
        tool: str,
        recorded: Mapping[str, str],
        record: StepRecorder,
        *,
        on_replay: Callable[[], None] = lambda: None,
    ) -> None:
        self._tool = tool
        self._recorded = dict(recorded)  # name -> JSON text, from earlier runs of this call
        self._record = record
        # Called when a step is served from its record: what the run did since the previous
        # step belongs to that recorded step (its ``ctx.state`` writes were committed with it).
        self._on_replay = on_replay
        self._seen: set[str] = set()
        self.replayed = 0  # steps served from their records in this run
        self.executed = 0  # steps whose function ran in this run

    async def run(self, name: str, fn: StepFn) -> Any:
        if not isinstance(name, str) or not name:
            raise StepError(f"{self._tool}: a step needs a non-empty string name, not {name!r}")
        if name in self._seen:
            # Names key the records: a repeat would be served the first one's value.
            raise StepError(
                f"{self._tool}: step {name!r} ran twice in one call; step names must be unique "
                "within a call (derive them from position or input, e.g. f'dns-{host}')"
            )
        self._seen.add(name)
        if name in self._recorded:
            self.replayed += 1
            self._on_replay()
            return json.loads(self._recorded[name])
        self.executed += 1
        if inspect.iscoroutinefunction(fn):
            value = await fn()
        else:
            # In a thread (a blocking call must not stall heartbeats), tracked as the tool's
            # code is (runtime/leases.py).
            value = await run_sync(fn, f"{self._tool}.{name}")
            if inspect.isawaitable(value):
                value = await value
        try:
            text = dumps(value)
        except (TypeError, ValueError) as exc:
            raise StepError(
                f"{self._tool}: step {name!r} returned a {type(value).__name__}, which is not "
                f"JSON ({exc}); a step's value is recorded and replayed: return dicts, lists, "
                "strings, numbers, booleans or None"
            ) from exc
        await self._record(name, text)
        self._recorded[name] = text
        return json.loads(text)
