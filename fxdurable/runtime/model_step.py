"""One model step: build the request from the records, stream the answer, record it.

Transient failures are counted in the journal (the turn's error budget survives crashes) and
retried with exponential backoff and jitter, honouring the provider's Retry-After. A
context-length error compacts older turns into a durable summary, then retries. Streamed text
is written to the event log every so often, so a crash mid-stream leaves it visible. A
response cut by its output limit in the middle of a tool call fails the turn
(``model_truncated``) without recording or running any of its calls (its text and tokens are
recorded, so usage totals count them); a text answer cut so is recorded as it is, marked
``truncated``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Fence, Held, Journal, ModelRound, StartNext
from fxdurable.core.records import (
    ErrorInfo,
    MessageRecord,
    SessionRecord,
    ToolTaskRecord,
    TurnRecord,
    Usage,
)
from fxdurable.core.store import ReadView
from fxdurable.errors import (
    AttachmentError,
    ContextLengthError,
    ModelError,
    ModelRetryableError,
    RecordNotFoundError,
    Suspend,
)
from fxdurable.runtime import relay, tracing
from fxdurable.runtime.agent import Agent, ModelRetries
from fxdurable.runtime.attachments import AttachmentLoader
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.held_view import HeldView, NeedsRead
from fxdurable.runtime.history import build_history, with_summary
from fxdurable.runtime.interrupts import LiveStream
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    Model,
    ModelRequest,
    ModelResponse,
    ToolSpec,
)
from fxdurable.runtime.models.fallback import dropped_parts, member, next_model
from fxdurable.runtime.models.thinking import thinking_of
from fxdurable.runtime.models.wire import is_complete_arguments

# The stop reason of a response the provider paused (Anthropic, a long server-tool turn).
PAUSED_STOP = "pause_turn"

__all__ = [
    "Failed",
    "ModelStep",
    "Prepared",
    "Recorded",
    "Retry",
    "Sleep",
    "backoff_delay",
    "cut_tool_calls",
    "truncated_message",
]

Sleep: TypeAlias = Callable[[float], Awaitable[None]]

SUMMARIZE_INSTRUCTIONS = (
    "Summarize the conversation so far for your own later use. Keep every fact, decision and "
    "open task, the outcome of every tool call, and say plainly which operations have an "
    "unknown outcome. Write the summary only."
)


@dataclass(frozen=True, slots=True)
class Recorded:
    """The response is in the journal; the turn goes on. ``recorded`` is what its commit
    wrote; ``then`` is what the caller's ``then`` returned, run in the same thread crossing."""

    recorded: ModelRound
    then: object = None


# The request for a model call, how many pending steering entries it shows the model, and
# whether it has stored attachments whose bytes are still to load (History's flag: scanning
# every message of a long session for one cost a step ~0.3 ms at 3,400 messages).
Prepared: TypeAlias = tuple[ModelRequest, int, bool]


@dataclass(frozen=True, slots=True)
class Retry:
    """Nothing recorded; call the model again (after a backoff, a compaction, or a switch to
    the next model of a Fallback chain: ``turn`` is then the turn as the switch wrote it)."""

    turn: TurnRecord | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    code: str
    message: str


StepOutcome: TypeAlias = Recorded | Retry | Failed


def backoff_delay(
    failures: int, retry_after_s: float | None, policy: ModelRetries, rng: random.Random
) -> float:
    """Exponential backoff with jitter (half fixed, half random), never below Retry-After."""
    ceiling: float = min(policy.max_s, policy.base_s * 2.0 ** max(0, failures - 1))
    delay: float = ceiling / 2 + rng.uniform(0, ceiling / 2)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return delay


class ModelStep:
    def __init__(
        self,
        journal: Journal,
        agent: Agent,
        fence: Fence,
        budget: InvocationBudget,
        *,
        sleep: Sleep,
        rng: random.Random,
        conversations: ConversationCache | None = None,
    ) -> None:
        self._journal = journal
        self._conversations = ConversationCache() if conversations is None else conversations
        self._agent = agent
        self._fence = fence
        self._budget = budget
        self._sleep = sleep
        self._rng = rng
        # The turn's images and documents, each blob read once for all its steps.
        self._attachments = AttachmentLoader(journal.store.get_blob)
        self.live: LiveStream | None = None  # the reply streaming now, for an interrupt

    def prepare(
        self, view: ReadView, turn: TurnRecord, known: Sequence[ToolTaskRecord] = ()
    ) -> Prepared:
        """Read what the model call of ``turn``'s next round is sent (sync: run it inside the
        crossing of the commit before it). ``known``: the last round's tool tasks as the
        caller's commits wrote them, so they are not read again."""
        return self._request(view, turn, known)

    def prepare_held(
        self,
        turn: TurnRecord,
        session: SessionRecord,
        messages: Sequence[MessageRecord],
        known: Sequence[ToolTaskRecord],
    ) -> Prepared | None:
        """:meth:`prepare` from the records the driver's own commits wrote (the session row,
        the messages they appended, the round's tasks), reading nothing; None when those cannot
        prove the request complete (runtime/held_view.py), so the caller reads."""
        try:
            return self._request(HeldView(session, messages, known), turn, known)
        except NeedsRead:
            return None

    @tracing.model_call
    async def run(
        self,
        turn: TurnRecord,
        round_: int,
        *,
        prepared: Prepared | None = None,
        then: Callable[[ModelRound], object] | None = None,
        start_next: Callable[[ModelRound], StartNext | None] | None = None,
        held: Callable[[], Held | None] | None = None,
    ) -> StepOutcome:
        """One model call. ``prepared`` is its request if the caller read it already;
        ``then`` runs right after the commit, in the same thread crossing. ``start_next``
        and ``held`` (what to write from, asked just before the commit) go to
        ``record_model_call``: the response's first intent may join its commit."""
        if prepared is None:
            prepared = await durable(self._journal.read, lambda view: self._request(view, turn))
        request, steering, stored = prepared
        if stored:  # after the read: a blob is read on its own
            try:
                request = await durable(self._attachments.load, request)
            except AttachmentError as exc:  # lost blob data: no retry brings it back
                return Failed("attachment_missing", str(exc))
        model = member(self._agent.model, turn.model)  # a Fallback chain's: the turn's
        crash_point("model.before-request")
        live = self.live = LiveStream(steering)
        live.task = streaming = asyncio.ensure_future(
            self._stream(request, turn.id, round_, model, live)
        )
        try:
            response = await streaming
        except asyncio.CancelledError:
            torn_down = (task := asyncio.current_task()) is not None and task.cancelling()
            if torn_down or not live.requested or not streaming.cancelled():
                raise  # the worker itself is being torn down
            # Cut by an abort or a steer (runtime/interrupts.py): what streamed is recorded
            # as recovery records a cut stream; the loop then decides (abort) or asks again.
            await durable(
                self._journal.interrupt_stream,
                self._fence,
                turn.id,
                round_=round_,
                text="".join(live.pending),
            )
            crash_point("model.after-cut")
            return Retry()
        except ModelError as exc:
            switched = await self._fall_back(turn, round_, request, model, exc)
            if switched is not None:
                return switched
            if isinstance(exc, ContextLengthError):
                return await self._compact(turn, exc, model)
            if isinstance(exc, ModelRetryableError):
                return await self._retry_later(turn, round_, exc, (request, model))
            return Failed("model_error", str(exc))
        finally:
            self.live = None
        crash_point("model.after-finish")
        answered = model.name
        cut = cut_tool_calls(response)
        if cut:
            # None of its calls may run, and none may be shown back to the model as a call it
            # made: the response is recorded without them, for its text and the tokens it
            # spent (usage totals count them), and the turn fails.
            await durable(
                self._journal.record_model_call,
                self._fence,
                turn.id,
                round_=round_,
                text=response.text,
                tool_calls=(),
                policies=(),
                usage=self._priced(response.usage),
                steering=steering,
                stop_reason=response.stop_reason,
                stop_inferred=response.stop_inferred,
                truncated=True,
                model=answered,
            )
            return Failed("model_truncated", truncated_message(response, cut))
        tools = [self._agent.tool(call.name) for call in response.tool_calls]

        content = response.content
        seen = thinking_of(
            response.tool_calls,
            [] if content is None else [(content.wire, p) for p in content.parts],
        )

        def record() -> Recorded:
            recorded = self._journal.record_model_call(
                self._fence,
                turn.id,
                round_=round_,
                text=response.text,
                tool_calls=response.tool_calls,
                # An unknown tool is never executed (it fails validation): "safe" is honest.
                policies=[tool.policy if tool is not None else "safe" for tool in tools],
                usage=self._priced(response.usage),
                steering=steering,
                stop_reason=response.stop_reason,
                stop_inferred=response.stop_inferred,
                truncated=response.truncated,
                model=answered,
                # A paused response is the turn so far: the next round continues it.
                paused=response.stop_reason == PAUSED_STOP,
                content=response.content,
                thinking=seen.shown(),
                thinking_hidden=seen.hidden,
                start_next=start_next,
                held=None if held is None else held(),
            )
            return Recorded(recorded, then(recorded) if then is not None else None)

        outcome = await durable(record)
        if response.stop_reason == PAUSED_STOP:
            crash_point("model.after-pause")  # the pause is durable, its continuation not yet
        return outcome

    # -- requests ------------------------------------------------------------------------------

    def _request(
        self, view: ReadView, turn: TurnRecord, known: Sequence[ToolTaskRecord] = ()
    ) -> Prepared:
        """The request, how many pending steering entries it shows the model, and whether it
        has stored attachments to load."""
        session = view.get_session(turn.session_id)
        if session is None:
            raise RecordNotFoundError(f"no session {turn.session_id!r}")
        # Only what is newer than the conversation this process holds, verified by the
        # session version read just now (see runtime/conversation.py).
        held = self._conversations.conversation(view, session, self._fence.token, known)
        history = held.history()
        steering = session.steering
        # Steering goes after the last tool results, where the record will put it (as user
        # messages just before this call's response) once the response is recorded.
        steer = [ChatMessage(role="user", text=text) for text in steering]
        return (
            ModelRequest(
                instructions=with_summary(self._agent.instructions, history.summary),
                messages=[*history.messages, *steer],
                tools=[
                    ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
                    for t in self._agent.tools
                ],
                output=self._agent.output.format if self._agent.output is not None else None,
                session_id=turn.session_id,
            ),
            len(steering),
            history.stored_attachments,
        )

    def _priced(self, usage: Usage) -> Usage:
        pricing = self._agent.pricing
        if pricing is None:
            return usage
        return replace(usage, cost_usd=pricing.cost_usd(usage))

    @tracing.model_response
    async def _stream(
        self,
        request: ModelRequest,
        turn_id: str | None,
        round_: int,
        model: Model,
        live: LiveStream | None = None,
    ) -> ModelResponse:
        """Read parts up to the finish; write streamed text as partials every so often.
        ``turn_id=None`` streams without partials (a compaction's summary). ``live``: the
        handle an interrupt cuts the stream through (its ``pending`` is this text)."""
        stream = model.stream(request)
        every = self._agent.durability.partial_text_every_s
        pending: list[str] = [] if live is None else live.pending
        last_flush = time.monotonic()
        deltas = 0
        try:
            async for part in stream:
                if isinstance(part, Finish):
                    return part.response  # recorded at the finish, never at the close
                deltas += 1
                pending.append(part.text)
                if turn_id is not None:
                    relay.forward(part.text)  # a subagent's text, up to its parent's call
                if turn_id is not None and time.monotonic() - last_flush >= every:
                    if live is not None:
                        live.flushing = True
                    try:
                        await durable(
                            self._journal.record_partial,
                            self._fence,
                            turn_id,
                            round_=round_,
                            text="".join(pending),
                        )
                    finally:
                        if live is not None:
                            live.flushing = False
                    pending.clear()
                    last_flush = time.monotonic()
                    if live is not None and live.requested:
                        raise asyncio.CancelledError  # cut while the partial was written
                if deltas == 1 and turn_id is not None:
                    crash_point("model.mid-stream")
        except (ModelError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a model implementation's own bug or an unmapped error
            raise ModelError(f"model {model.name!r} failed: {exc!r}") from exc
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        raise ModelRetryableError(f"model {model.name!r} ended its stream without finishing")

    # -- failures ------------------------------------------------------------------------------

    async def _fall_back(
        self,
        turn: TurnRecord,
        round_: int,
        request: ModelRequest,
        model: Model,
        exc: ModelError,
        *,
        retries_spent: bool = False,
    ) -> Retry | None:
        """Switch the turn to its Fallback chain's next model if ``exc`` says so (recorded:
        recovery goes on with the new model), or None (runtime/models/fallback.py)."""
        switch = next_model(self._agent.model, model.name, exc, retries_spent=retries_spent)
        if switch is None:
            return None
        switched = await durable(
            self._journal.record_model_switch,
            self._fence,
            turn.id,
            round_=round_,
            from_model=model.name,
            to_model=switch.to.name,
            reason=switch.reason,
            dropped_parts=dropped_parts(request.messages, switch.to),
        )
        return Retry(switched)

    async def _retry_later(
        self,
        turn: TurnRecord,
        round_: int,
        exc: ModelRetryableError,
        called: tuple[ModelRequest, Model] | None = None,
    ) -> StepOutcome:
        policy = self._agent.durability.model_retries
        chosen: list[float] = []  # the wait the committed transaction recorded (the last run)

        def backoff_s(failures: int) -> float:
            chosen.append(backoff_delay(failures, exc.retry_after_s, policy, self._rng))
            return chosen[-1]

        updated = await durable(
            self._journal.record_model_error,
            self._fence,
            turn.id,
            round_=round_,
            error=ErrorInfo(code="model_unavailable", message=str(exc)),
            backoff_s=backoff_s,
        )
        if updated.model_errors > policy.budget:
            switched = None
            if called is not None:
                switched = await self._fall_back(
                    updated, round_, called[0], called[1], exc, retries_spent=True
                )
            if switched is not None:
                return switched
            return Failed(
                "model_error",
                f"the model failed {updated.model_errors} times in this turn (budget "
                f"{policy.budget}); last error: {exc}",
            )
        delay = chosen[-1]
        remaining = self._budget.remaining()
        if remaining is not None and delay >= remaining:
            # The wait does not fit in this invocation: the turn records when it ends, and a
            # continuation delayed by the wait (where the queue can delay a wake) retries.
            raise Suspend("model backoff", resume_after_s=delay)
        await self._sleep(delay)
        return Retry()

    async def _compact(
        self, turn: TurnRecord, exc: ContextLengthError, model: Model
    ) -> StepOutcome:
        """Summarise the turns before this one into a durable summary, then retry."""

        def plan(view: ReadView) -> tuple[int, ModelRequest] | None:
            session = view.get_session(turn.session_id)
            # From the latest summary on: what an earlier compaction covered stays covered.
            messages = view.messages(
                turn.session_id, after=session.compacted_upto if session is not None else 0
            )
            cutoff = _compactable_upto(messages, turn.id)
            if cutoff is None:
                return None
            earlier = [m for m in messages if m.seq <= cutoff]
            history = build_history(earlier, view.session_tool_tasks(turn.session_id))
            instructions = with_summary(SUMMARIZE_INSTRUCTIONS, history.summary)
            ask = ChatMessage(role="user", text="Summarize the conversation above.")
            return cutoff, ModelRequest(
                instructions=instructions, messages=[*history.messages, ask]
            )

        planned = await durable(self._journal.read, plan)
        if planned is None:
            return Failed(
                "context_length",
                # Either the context window or a per-minute token limit: exc says which.
                f"the current turn alone is too large for the model and nothing earlier is "
                f"left to compact: {exc}",
            )
        cutoff, request = planned
        if AttachmentLoader.needed(request):
            request = await durable(self._attachments.load, request)
        try:
            summary = await self._stream(request, None, -1, model)
        except ContextLengthError as again:
            return Failed("context_length", f"even the summary request is too long: {again}")
        except ModelRetryableError as transient:
            return await self._retry_later(turn, turn.rounds, transient)
        except ModelError as fatal:
            return Failed("model_error", f"compaction failed: {fatal}")
        await durable(
            self._journal.record_compaction,
            self._fence,
            turn.id,
            summary=summary.text,
            upto_seq=cutoff,
            model=model.name,
            usage=self._priced(summary.usage),
        )
        return Retry()


def cut_tool_calls(response: ModelResponse) -> list[str]:
    """The names of the tool calls a truncated response left unfinished (empty when it was
    not truncated, or when every call's arguments were closed before the cut)."""
    if not response.truncated:
        return []
    return [c.name for c in response.tool_calls if not is_complete_arguments(c.arguments)]


def truncated_message(response: ModelResponse, cut: Sequence[str]) -> str:
    return (
        f"the model's response was cut off by its output limit (stop reason "
        f"{response.stop_reason!r}, {response.usage.output_tokens} output tokens) in the "
        f"middle of a tool call ({', '.join(cut)}); none of its {len(response.tool_calls)} "
        "tool call(s) was run. Raise the model's output limit (max_tokens) or ask for a "
        "smaller step."
    )


def _compactable_upto(messages: Sequence[MessageRecord], turn_id: str) -> int | None:
    """The last message before this turn not yet covered by a summary, or None."""
    covered = max((m.summarizes_upto or 0 for m in messages if m.role == "summary"), default=0)
    this_turn = [m.seq for m in messages if m.turn_id == turn_id and m.role != "summary"]
    start = min(this_turn) if this_turn else None
    candidates = [
        m.seq
        for m in messages
        if m.role != "summary" and m.seq > covered and (start is None or m.seq < start)
    ]
    return max(candidates) if candidates else None
