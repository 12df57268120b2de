"""A turn whose body is a framework's own loop (a LangGraph agent, say): its model calls and
tool calls answered by fxdurable's turn driver, in lockstep, from the journal.

fxdurable's turn driver stays the durable engine: it decides what to record and when (intent
before effect, replay policies, unknown outcomes, refused blind repeats, questions, aborts,
budgets, deadlines), exactly as for its own agents. What it calls are a :class:`DrivenModel`
and one driven tool per framework tool; each, instead of calling a provider or a function,
waits for the framework's loop to reach the same call, lets the framework make it (in the
framework's own task, with its own middleware and context), and hands back what came of it.

The framework's loop (the *body*) runs as a task the first time the driver calls in during an
attempt, from the start of the turn: the conversation before the turn and the turn's prompt,
both read from the journal. Every call the body makes is matched by its *position in the
turn* (model call k; tool call i of model call k), never by timing:

- a position the journal has settled is answered from the record (a recovered turn replays
  its model replies and tool results, so no recorded model call is made again and no recorded
  tool runs again);
- the position the driver is waiting on runs live;
- any other position waits until one of those is true. Tool results always reach the body
  from the record, whatever settled them (an execution, an unknown outcome, a refusal, a
  person's denial), so what the body saw is what a replay will show it.

The body learns its run from a context variable (:func:`current_run`), set for its task only;
outside an fxdurable turn there is none, and a framework middleware then lets calls through.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field

from fxdurable.errors import FxDurableError, ModelError
from fxdurable.runtime.leases import current_lease
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextDelta,
    opens_turn,
    without_interruptions,
)
from fxdurable.runtime.tools import ToolContext

__all__ = [
    "DrivenModel",
    "DrivenRun",
    "DrivenTurns",
    "LiveCall",
    "RecordedRound",
    "ReplayMismatchError",
    "TurnView",
    "current_run",
    "turn_view",
]


class ReplayMismatchError(FxDurableError):
    """A recovered turn's framework loop asked for a call that is not the one the journal
    recorded at that position (another tool, other arguments, another conversation): the
    loop is not deterministic between calls, and replaying it would diverge silently. The
    message names both calls; the turn fails rather than run the wrong thing."""


@dataclass(frozen=True, slots=True)
class RecordedRound:
    """One recorded model call of the turn: its reply (with its tool calls, under the ids the
    history gives them) and the results recorded so far, by call id."""

    reply: ChatMessage
    results: dict[str, ChatMessage] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnView:
    """The running turn as the journal holds it: what came before its prompt, the prompt,
    and its recorded rounds in order."""

    earlier: tuple[ChatMessage, ...]
    prompt: ChatMessage
    rounds: tuple[RecordedRound, ...]


def turn_view(messages: Sequence[ChatMessage]) -> TurnView:
    """The running turn in ``messages`` (the conversation the journal gives the model): it
    starts at the last message a person wrote. Replies a crash cut off are left out: their
    model call is made again."""
    shown = without_interruptions(messages)
    starts = [i for i, m in enumerate(shown) if opens_turn(m)]
    if not starts:
        raise ModelError("the turn has no prompt in the journal's conversation")
    start = starts[-1]
    rounds: list[RecordedRound] = []
    for message in shown[start + 1 :]:
        if message.role == "assistant":
            rounds.append(RecordedRound(message))
        elif message.role == "tool" and rounds and message.tool_call_id is not None:
            rounds[-1].results[message.tool_call_id] = message
    return TurnView(tuple(shown[:start]), shown[start], tuple(rounds))


class LiveCall:
    """The call the driver waits on, made by the body: ``deliver`` its outcome or ``fail``."""

    __slots__ = ("_future", "context", "texts")

    def __init__(self, context: ToolContext | None = None) -> None:
        self._future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.context = context  # a tool call's fxdurable context
        self.texts: asyncio.Queue[str] = asyncio.Queue()  # a model call's streamed text

    def deliver(self, value: object) -> None:
        if not self._future.done():
            self._future.set_result(value)

    def fail(self, error: BaseException) -> None:
        if not self._future.done():
            self._future.set_exception(error)


class _Slot:
    """One position of the turn: recorded, live, or not yet either."""

    __slots__ = ("live", "ready", "recorded", "settled")

    def __init__(self) -> None:
        self.ready = asyncio.Event()  # recorded or live
        self.settled = asyncio.Event()  # recorded
        self.recorded: ChatMessage | None = None
        self.live: LiveCall | None = None

    def record(self, message: ChatMessage) -> None:
        if self.recorded is None:
            self.recorded = message
            self.ready.set()
            self.settled.set()


ModelKey = int
ToolKey = tuple[int, int]  # (model call, index of the call in its reply)


class DrivenRun:
    """One attempt of one turn: the body's task and the positions it has reached."""

    def __init__(self, view: TurnView) -> None:
        self.view = view
        self.task: asyncio.Task[object] | None = None
        self._models: dict[ModelKey, _Slot] = {}
        self._tools: dict[ToolKey, _Slot] = {}
        self._model_calls = 0  # how many model calls the body has made
        # The replies the body was given, by model call: a tool call's id names its position.
        self.replies: dict[int, ChatMessage] = {}
        self._positions: dict[str, ToolKey] = {}
        self._streaming: LiveCall | None = None  # the live model call, while it streams

    # -- the driver's side ---------------------------------------------------------------------

    def refresh(self, view: TurnView) -> None:
        """Settle every position the journal has recorded."""
        for k, round_ in enumerate(view.rounds):
            self._model(k).record(round_.reply)
            for index, call in enumerate(round_.reply.tool_calls):
                result = round_.results.get(call.provider_id or "")
                if result is not None:
                    self._tool((k, index)).record(result)

    async def run_live(self, slot: _Slot, call: LiveCall) -> object:
        """Make ``slot`` live and wait for the body's outcome (or its end)."""
        slot.live = call
        slot.ready.set()
        task = self.task
        assert task is not None
        waiting = asyncio.ensure_future(call._future)
        try:
            await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            waiting.cancel()
            self.cancel()  # an abort, a timeout, a lost lease: the body's call stops too
            raise
        if waiting.done():
            return waiting.result()
        waiting.cancel()
        error = task.exception()
        if error is not None:
            raise error
        raise ModelError(
            "the framework's agent ended its run before making the call the turn needs "
            "(a middleware that ends the run early, or jumps past the model, is not supported)"
        )

    async def stream_live(self, k: int) -> AsyncIterator[StreamPart]:
        """Make model call ``k`` live: its streamed text as it comes, then its reply."""
        call = self._streaming = LiveCall()
        outcome = asyncio.ensure_future(self.run_live(self._model(k), call))
        try:
            while not outcome.done():
                text = asyncio.ensure_future(call.texts.get())
                await asyncio.wait({text, outcome}, return_when=asyncio.FIRST_COMPLETED)
                if text.done():
                    yield TextDelta(text.result())
                else:
                    text.cancel()
            while not call.texts.empty():  # said before the reply came back
                yield TextDelta(call.texts.get_nowait())
            response = outcome.result()
        finally:
            self._streaming = None
            if not outcome.done():  # the driver stopped reading: the call goes with it
                outcome.cancel()
        if not isinstance(response, ModelResponse):
            raise ModelError(f"the agent's model call gave {type(response).__name__}")
        yield Finish(response)

    def stream_text(self, text: str) -> None:
        """The body's live model call streamed ``text``: on to the driver's event log."""
        if self._streaming is not None and text:
            self._streaming.texts.put_nowait(text)

    def model_slot(self, k: int) -> _Slot:
        return self._model(k)

    def tool_slot(self, key: ToolKey) -> _Slot:
        return self._tool(key)

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    @property
    def ended(self) -> bool:
        return self.task is not None and self.task.done()

    # -- the body's side -----------------------------------------------------------------------

    async def next_model_call(self) -> tuple[int, _Slot]:
        """The body's next model call: its position and slot, once recorded or live."""
        k = self._model_calls
        self._model_calls += 1
        slot = self._model(k)
        await slot.ready.wait()
        return k, slot

    def given(self, k: int, reply: ChatMessage) -> None:
        """The body was given ``reply`` for model call ``k``: its calls' ids name positions."""
        self.replies[k] = reply
        for index, call in enumerate(reply.tool_calls):
            self._positions[call.provider_id or ""] = (k, index)

    def position_of(self, call_id: str) -> ToolKey:
        found = self._positions.get(call_id)
        if found is None:
            raise ReplayMismatchError(
                f"the agent ran a tool call (id {call_id!r}) that no model reply of this turn "
                "asked for"
            )
        return found

    async def tool_call(self, key: ToolKey) -> _Slot:
        slot = self._tool(key)
        await slot.ready.wait()
        return slot

    # -- slots ---------------------------------------------------------------------------------

    def _model(self, k: ModelKey) -> _Slot:
        return self._models.setdefault(k, _Slot())

    def _tool(self, key: ToolKey) -> _Slot:
        return self._tools.setdefault(key, _Slot())


_RUN: contextvars.ContextVar[DrivenRun | None] = contextvars.ContextVar(
    "fxdurable_driven_run", default=None
)


def current_run() -> DrivenRun | None:
    """The driven run the calling body belongs to, or None outside an fxdurable turn."""
    return _RUN.get()


Body = Callable[[TurnView], Coroutine[object, object, object]]


class DrivenTurns:
    """The driven runs of one agent in this process, one per session: a new attempt (a new
    lease claim) or a new turn starts a new run, and the one it replaces is cancelled."""

    def __init__(self, body: Body) -> None:
        self._body = body
        self._runs: dict[str, tuple[object, int, DrivenRun]] = {}

    def run_for(self, session_id: str, view: TurnView) -> DrivenRun:
        """The session's run for this attempt of this turn (started if new), refreshed with
        what the journal holds."""
        # The lease view is one object per claim (runtime/leases.py): a new attempt's.
        claim, opening = current_lease(), len(view.earlier)
        known = self._runs.get(session_id)
        if known is not None:
            held, at, run = known
            if held is claim and at == opening and not run.ended:
                run.refresh(view)
                return run
            run.cancel()
        run = DrivenRun(view)
        run.refresh(view)
        context = contextvars.copy_context()
        context.run(_RUN.set, run)
        run.task = asyncio.get_running_loop().create_task(self._body(view), context=context)
        self._runs[session_id] = (claim, opening, run)
        return run

    def model_call(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """The driver's model call, made by the body at the same position: its streamed
        text, then its reply."""
        view = turn_view(request.messages)
        run = self.run_for(request.session_id or "", view)
        return run.stream_live(len(view.rounds))

    async def tool_call(self, ctx: ToolContext, history: Sequence[ChatMessage]) -> object:
        """The driver's tool call (``history``: the conversation the journal holds now): run
        by the body at the same position, its result handed back to be recorded."""
        view = turn_view(history)
        run = self.run_for(ctx.session_id, view)
        tasks = ctx.records.tool_tasks(ctx.turn_id) if ctx.records is not None else ()
        index = next((t.index for t in tasks if t.execution_id == ctx.execution_id), None)
        if index is None:
            raise ModelError(f"no tool task of turn {ctx.turn_id} has this call's id")
        return await run.run_live(run.tool_slot((ctx.round, index)), LiveCall(ctx))


class DrivenModel:
    """fxdurable's model boundary over a driven body: each model call is the body's."""

    def __init__(self, turns: DrivenTurns, name: str) -> None:
        self._turns = turns
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        return self._turns.model_call(request)
