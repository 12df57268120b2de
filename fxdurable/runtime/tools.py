"""Tools: a name, a description, a pydantic input model, a replay policy and an ``execute``.

The replay policy says what recovery may do with a call that was interrupted mid-flight
(DESIGN §3.5): ``"safe"`` re-executes it, ``"idempotent"`` re-executes it with the same
``ctx.execution_id``, ``"unsafe"`` never re-executes it and tells the model the outcome is
unknown. A policy is one of these three names, nothing else: the policies carry no settings,
and the name is what the journal records for each call.

A ``durable=True`` tool (``async def``) records its sub-steps with ``await ctx.step(name, fn)``
(:mod:`fxdurable.runtime.steps`): recovery re-executes it with its completed steps replayed
from their records, instead of leaving it unknown. Its policy defaults to ``"unsafe"``: that is
the path it falls back to if a later deploy no longer declares it durable.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import json
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeAlias,
    TypeVar,
    cast,
    get_args,
    get_type_hints,
    overload,
)

import pydantic

from fxdurable.core.clock import Clock, SystemClock
from fxdurable.core.codec import dumps
from fxdurable.core.records import AttachmentRef
from fxdurable.errors import ConfigurationError, StepError, ToolInputError
from fxdurable.runtime import timers
from fxdurable.runtime.attachments import ToolResult, store_attachments
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.decide import canonical_arguments
from fxdurable.runtime.leases import LeaseView, run_sync
from fxdurable.runtime.models.wire import decode_arguments
from fxdurable.runtime.state import ToolState
from fxdurable.runtime.steps import StepFn, StepLog
from fxdurable.runtime.tool_retry import Retry

if TYPE_CHECKING:
    from fxdurable.runtime.children import ChildSessions
    from fxdurable.runtime.tool_records import BlobWriter, ToolRecords

__all__ = [
    "REPLAY_POLICIES",
    "ReplayPolicy",
    "Tool",
    "ToolContext",
    "define_tool",
    "tool",
]


ReplayPolicy: TypeAlias = Literal["safe", "idempotent", "unsafe"]
StepValue = TypeVar("StepValue")
REPLAY_POLICIES: tuple[ReplayPolicy, ...] = get_args(ReplayPolicy)

# Input model class -> its JSON schema (Tool.json_schema). Weak keys: a tool defined per
# request, with a model class of its own, does not keep that class alive.
_SCHEMAS: weakref.WeakKeyDictionary[type[pydantic.BaseModel], dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool's ``execute`` receives besides its input.

    ``execution_id`` is the same on every retry of this call, across crashes and workers: pass
    it to the downstream system as its idempotency key. ``cancelled`` is set when the turn is
    aborted or the call is cancelled otherwise (its ``timeout_s``, a lost lease, a shutdown
    past its grace); a long tool should check it and stop: its run keeps the session's lease
    until its code has returned. ``step`` records a durable tool's
    sub-steps. ``state`` is the session's persisted key/value state: this call's writes
    commit with its result (:mod:`fxdurable.runtime.state`). ``records`` reads the runtime's
    store (a session's record, a blob) and ``blobs`` puts content-addressed blobs (the
    workspace tools, :mod:`fxdurable.tools`); neither can open a transaction: a tool's writes
    to its session go through ``state`` (:mod:`fxdurable.runtime.tool_records`).
    ``lease`` is the lease the call runs under (``held``, ``expires_at``, ``remaining_s()``;
    docs/leases.md): a long tool checks it at safe points and stops once it is no longer
    held, before the runtime stops it for good (a sync tool still running then ends the
    worker process).
    """

    execution_id: str
    session_id: str
    tool_name: str
    attempt: int
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    # Where ``progress`` reports go: the turn driver's throttled writer for the running task.
    report: Callable[[str], None] = field(default=lambda chunk: None, repr=False)
    steps: StepLog | None = None  # set for a durable tool's call; runtime-only, never stored
    # Child sessions for a subagent's call (fx.subagent); runtime-only, never stored.
    children: ChildSessions | None = None
    # The session's persisted state as of the call's start, plus the call's own writes.
    state: ToolState = field(default_factory=ToolState)
    # The runtime's store, read-only, and its blob writer (runtime-only, never stored); None
    # outside a runtime (unit tests).
    records: ToolRecords | None = field(default=None, repr=False)
    blobs: BlobWriter | None = field(default=None, repr=False)
    # Where the call sits in its turn: the calls of one parallel batch share turn_id and
    # round (the stored workspace tells a sibling's concurrent write from an older one).
    turn_id: str = ""
    round: int = -1
    # The lease this call runs under, as the heartbeat last renewed it (runtime-only).
    lease: LeaseView = field(default_factory=LeaseView, repr=False)
    # The runtime's clock and sleep, for ``sleep``/``wait_until`` (tests inject both).
    clock: Clock = field(default_factory=SystemClock, repr=False)
    sleeper: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)
    # Numbers the call's waits, each one's step name (a fresh count per execution).
    wait_names: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def progress(self, chunk: str) -> None:
        """Report progress: ``chunk`` is appended to the running task's ``progress`` (its last
        4 KB), which ``session.task(...)``, ``GET /sessions/{id}`` and the chat stream show
        while the call runs. Written at most every 100 ms (reports in between coalesce);
        never blocks, never raises, never an event: the result replaces it. Callable from a
        sync tool's thread or an async tool."""
        self.report(chunk)

    # Typed as ``fn``'s result, so ``return await ctx.step(...)`` checks under mypy --strict
    # (an ``Any`` would not). What comes back is that value through JSON, recorded or not:
    # the same for a str, number, bool, None, list or dict of those; a tuple is a list.
    @overload
    async def step(self, name: str, fn: Callable[[], Awaitable[StepValue]]) -> StepValue: ...
    @overload
    async def step(self, name: str, fn: Callable[[], StepValue]) -> StepValue: ...
    async def step(self, name: str, fn: StepFn) -> Any:
        """Run ``fn`` (sync or async, no arguments) once per call of this durable tool and
        return its JSON value; if the call re-executes after a crash, return the recorded
        value without calling ``fn``. ``name`` must be unique within the call. Raises
        :class:`~fxdurable.errors.StepError` on a repeated name or a value that is not JSON,
        or when the tool is not declared ``durable=True``."""
        if self.steps is None:
            raise StepError(
                f"{self.tool_name}: ctx.step needs a durable tool; declare it with "
                "@tool(durable=True) (or define_tool(..., durable=True))"
            )
        return await self.steps.run(name, fn)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, durably: the wake-up time is recorded as a step, so after a
        crash the call waits only for what is left (:mod:`fxdurable.runtime.timers`).
        Returns early once ``cancelled`` is set. Needs a durable tool, as ``step`` does."""
        await timers.sleep_for(self, seconds)

    async def wait_until(self, t: float) -> None:
        """Wait until the wall-clock time ``t`` (epoch seconds), durably, as :meth:`sleep`."""
        await timers.wait_until(self, t)


ToolFn: TypeAlias = Callable[[Any, ToolContext], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    name: str
    description: str
    input_model: type[pydantic.BaseModel]
    execute: ToolFn
    replay: ReplayPolicy = "safe"
    reuse: bool = True  # False: a recovered turn re-runs a completed (safe) call
    timeout_s: float = 300.0
    # Records its ctx.step sub-steps; recovery re-executes it with them replayed.
    durable: bool = False
    # Runs again on transient errors, in the same execution (runtime/tool_retry.py).
    retry: Retry | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.replay, str) or self.replay not in REPLAY_POLICIES:
            raise ConfigurationError(
                f"tool {self.name!r}: replay must be one of "
                f"{', '.join(repr(p) for p in REPLAY_POLICIES)}, not {self.replay!r}"
            )
        if not self.reuse and self.replay != "safe":
            raise ConfigurationError(
                f"tool {self.name!r}: reuse=False re-executes a completed call, which only a "
                "safe (read-only) tool may do"
            )
        if self.durable and not inspect.iscoroutinefunction(self.execute):
            raise ConfigurationError(
                f"tool {self.name!r}: a durable tool awaits its steps (await ctx.step(...)); "
                "make execute an async def (a step's function may stay sync)"
            )
        if self.durable and not self.reuse:
            raise ConfigurationError(
                f"tool {self.name!r}: reuse=False re-runs a call fresh, while a durable tool "
                "replays its recorded steps; choose one"
            )
        if self.retry is not None:
            if not isinstance(self.retry, Retry):
                raise ConfigurationError(
                    f"tool {self.name!r}: retry takes fx.Retry(...), not {self.retry!r}"
                )
            if self.durable:
                raise ConfigurationError(
                    f"tool {self.name!r}: a durable tool replays its recorded steps, so a "
                    "second run would replay a failed step, not retry it; retry inside the "
                    "step's function instead"
                )
            self.retry.check_for(self.name, self.replay)
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigurationError(f"tool name {self.name!r} must be letters, digits, _ or -")

    @property
    def policy(self) -> ReplayPolicy:
        """The replay policy, as the journal records it on each call (the same as ``replay``)."""
        return self.replay

    @property
    def threaded(self) -> bool:
        """Its ``execute`` is sync: it runs in a thread no cancellation stops."""
        return not inspect.iscoroutinefunction(self.execute)

    def json_schema(self) -> dict[str, Any]:
        """The input model's JSON schema, built once per model class and shared: every model
        request carries it, and pydantic takes about a millisecond to build it, which was a
        fifth of a tool step. Callers treat it as read-only."""
        schema = _SCHEMAS.get(self.input_model)
        if schema is None:
            schema = _SCHEMAS[self.input_model] = self.input_model.model_json_schema()
        return schema

    def parse(self, arguments: str) -> pydantic.BaseModel:
        """Validate the model's JSON arguments; raise ToolInputError with a readable reason."""
        try:
            raw = decode_arguments(arguments)
        except ValueError as exc:
            raise ToolInputError(f"arguments are not valid JSON: {exc}") from exc
        try:
            return self.input_model.model_validate(raw)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolInputError(f"invalid arguments for {self.name}: {problems}") from exc

    def canonical_input(self, arguments: str) -> str:
        """What ``arguments`` ask for, as one comparable string: the validated input with its
        defaults filled in (sorted keys), so two spellings of the same call compare equal.
        Arguments that do not validate fall back to their canonical JSON text."""
        try:
            dumped = self.parse(arguments).model_dump(mode="json")
        except ToolInputError:
            return canonical_arguments(arguments)
        return dumps(dumped)

    async def run(self, arguments: pydantic.BaseModel, ctx: ToolContext) -> str:
        """Execute (sync functions run in a thread) and render the result as text."""
        text, _ = await self.run_with_attachments(arguments, ctx)
        return text

    async def run_with_attachments(
        self, arguments: pydantic.BaseModel, ctx: ToolContext
    ) -> tuple[str, tuple[AttachmentRef, ...]]:
        """:meth:`run`, and the refs of the images a :class:`ToolResult` returned (their
        blobs put before the call's result is committed)."""
        if inspect.iscoroutinefunction(self.execute):
            result = await cast(Callable[..., Awaitable[Any]], self.execute)(arguments, ctx)
        else:
            # Tracked: a thread still in it when the lease cannot be renewed is stopped for
            # good (runtime/leases.py); cancelling the await alone would leave it running.
            result = await run_sync(self.execute, self.name, arguments, ctx)
        if isinstance(result, ToolResult):
            if ctx.blobs is None:
                raise ConfigurationError("a ToolResult's attachments need the store's blobs")
            refs = await durable(store_attachments, ctx.blobs.put, result.attachments)
            return result.text, refs
        return render_result(result), ()


def render_result(result: object) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, pydantic.BaseModel):
        return result.model_dump_json()
    return json.dumps(result, default=str, ensure_ascii=False)


def define_tool(
    name: str,
    *,
    description: str,
    input_model: type[pydantic.BaseModel],
    execute: ToolFn,
    replay: ReplayPolicy | None = None,
    reuse: bool = True,
    timeout_s: float = 300.0,
    durable: bool = False,
    retry: Retry | None = None,
) -> Tool:
    """``replay`` defaults to ``"unsafe"`` for a durable tool (what recovery falls back to if
    a later deploy drops ``durable``), ``"safe"`` otherwise. ``retry``: run the call again on
    transient errors (:mod:`fxdurable.runtime.tool_retry`)."""
    return Tool(
        name=name,
        description=description,
        input_model=input_model,
        execute=execute,
        replay=replay if replay is not None else ("unsafe" if durable else "safe"),
        reuse=reuse,
        timeout_s=timeout_s,
        durable=durable,
        retry=retry,
    )


@overload
def tool(fn: ToolFn, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    replay: ReplayPolicy | None = None,
    reuse: bool = True,
    timeout_s: float = 300.0,
    durable: bool = False,
    retry: Retry | None = None,
) -> Callable[[ToolFn], Tool]: ...
def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    replay: ReplayPolicy | None = None,
    reuse: bool = True,
    timeout_s: float = 300.0,
    durable: bool = False,
    retry: Retry | None = None,
) -> Tool | Callable[[ToolFn], Tool]:
    """Make a tool of ``def f(input: SomeModel, ctx: ToolContext)`` (sync or async), or of
    ``def f(input: SomeModel)`` when it needs no context.

    The input model comes from the first parameter's annotation, the description from the
    docstring. ``durable=True`` (an ``async def``): see :mod:`fxdurable.runtime.steps`.
    """

    def wrap(func: ToolFn) -> Tool:
        params = list(inspect.signature(func).parameters)
        hints = get_type_hints(func)
        model = hints.get(params[0]) if params else None
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise ConfigurationError(
                f"@tool {func.__name__}: annotate the first parameter with a pydantic model"
            )
        return define_tool(
            name or func.__name__,
            description=inspect.cleandoc(func.__doc__ or func.__name__),
            input_model=model,
            execute=_without_context(func) if len(params) == 1 else func,
            replay=replay,
            reuse=reuse,
            timeout_s=timeout_s,
            durable=durable,
            retry=retry,
        )

    return wrap(fn) if fn is not None else wrap


def _without_context(func: ToolFn) -> ToolFn:
    """A tool function of the input alone, called as every tool is, ``(input, ctx)``."""
    one = cast(Callable[[pydantic.BaseModel], Any], func)
    if inspect.iscoroutinefunction(func):

        async def call_async(inp: pydantic.BaseModel, ctx: ToolContext) -> Any:
            return await one(inp)

        return cast(ToolFn, functools.update_wrapper(call_async, func))

    def call(inp: pydantic.BaseModel, ctx: ToolContext) -> Any:
        return one(inp)

    return cast(ToolFn, functools.update_wrapper(call, func))
