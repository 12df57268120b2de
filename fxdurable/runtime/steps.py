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

A step that raises is recorded too: its exception's class, message and arguments. The error
propagates as it was raised; on replay the same class is raised again with the same
arguments, so an ``except`` around the step takes the same branch (a tool that catches the
error and takes a fallback step, then crashes, takes the fallback again, and the failed step
does not run a second time). Where the class cannot be rebuilt (not loaded in this process,
or it does not take back its arguments) replay raises
:class:`~fxdurable.errors.RecordedStepError` naming it. The runtime's own errors
(:class:`~fxdurable.errors.FxDurableError`: a lost lease, a misused step) are not a step's
outcome and are not recorded.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fxdurable.core.codec import dumps
from fxdurable.errors import FxDurableError, RecordedStepError, StepError
from fxdurable.runtime.leases import run_sync

__all__ = ["StepFn", "StepLog", "StepRecorder"]

StepFn = Callable[[], Any]  # sync, async, or sync returning an awaitable
# Commits a step's JSON value (or, third, its error's JSON) under its name: a fenced journal
# transition.
StepRecorder = Callable[[str, str, "str | None"], Awaitable[None]]
# A recorded step: its value's JSON text, and its error's when it raised.
Recorded = tuple[str, "str | None"]


class StepLog:
    """The steps of one run of one durable tool call."""

    def __init__(
        self,
        tool: str,
        recorded: Mapping[str, Recorded],
        record: StepRecorder,
        *,
        on_replay: Callable[[], None] = lambda: None,
    ) -> None:
        self._tool = tool
        self._recorded = dict(recorded)  # name -> what earlier runs of this call recorded
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
            value_text, error_text = self._recorded[name]
            if error_text is not None:
                raise replayed_error(self._tool, name, error_text)
            return json.loads(value_text)
        self.executed += 1
        try:
            value = await self._call(name, fn)
        except FxDurableError:
            raise  # the runtime's own (a lost lease, a misused step): not the step's outcome
        except Exception as exc:
            error_text = error_json(exc)
            await self._record(name, "null", error_text)
            self._recorded[name] = ("null", error_text)
            raise
        try:
            text = dumps(value)
        except (TypeError, ValueError) as exc:
            raise StepError(
                f"{self._tool}: step {name!r} returned a {type(value).__name__}, which is not "
                f"JSON ({exc}); a step's value is recorded and replayed: return dicts, lists, "
                "strings, numbers, booleans or None"
            ) from exc
        await self._record(name, text, None)
        self._recorded[name] = (text, None)
        return json.loads(text)

    async def _call(self, name: str, fn: StepFn) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn()
        # In a thread (a blocking call must not stall heartbeats), tracked as the tool's code
        # is (runtime/leases.py).
        value = await run_sync(fn, f"{self._tool}.{name}")
        if inspect.isawaitable(value):
            value = await value
        return value


def error_json(exc: Exception) -> str:
    """What a step's exception is recorded as: its class, message and arguments (``None``
    when they are not JSON: replay cannot rebuild it then)."""
    cls = type(exc)
    args: list[Any] | None = list(exc.args)
    try:
        dumps(args)
    except (TypeError, ValueError):
        args = None
    return dumps(
        {"module": cls.__module__, "qualname": cls.__qualname__, "message": str(exc), "args": args}
    )


def replayed_error(tool: str, step: str, text: str) -> Exception:
    """The recorded error rebuilt: its own class with its own arguments where that class is
    loaded here and takes them back, else a :class:`RecordedStepError` naming it."""
    data = json.loads(text)
    error_type = f"{data['module']}.{data['qualname']}"
    cls: Any = sys.modules.get(data["module"])  # never imports: the record names the module
    for part in str(data["qualname"]).split("."):
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and data["args"] is not None:
        try:
            exc: Exception = cls(*data["args"])
        except Exception:
            pass
        else:
            exc.add_note(f"replayed from the record of {tool} step {step!r}")
            return exc
    return RecordedStepError(
        f"{tool}: step {step!r} raised {error_type}: {data['message']} (replayed from its "
        "record; the class could not be raised again here)",
        step=step,
        error_type=error_type,
    )
