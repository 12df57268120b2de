"""The DynamoDB store's requests per step, counted (never timed) on a moto server.

On DynamoDB every request is billed, so the figure that matters is how many a step sends.
All are read from :attr:`DynamoStore.requests <fxdurable.stores.dynamodb.DynamoStore.requests>`
(every DynamoDB and S3 request the store sends; tests/stores/test_dynamodb_steps.py checks it
against botocore's own ``before-call`` hook):

- ``journal model step``: ``record_model_call`` on the journal alone, the session held;
- ``journal tool step``: ``start_tool`` + ``finish_tool``;
- ``runtime tool step``: one tool step plus the model call after it through the real
  :class:`~fxdurable.Runtime` (reads included): one wake of a turn of :data:`FEW` tool steps
  and one of :data:`MANY`, the difference divided by the extra steps, so admission, claim,
  settle and release cancel out; on sessions with :data:`SHORT` and :data:`LONG` earlier
  messages, which must cost the same;
- ``runtime model step`` and ``runtime tool result``: that step on either side of the tool
  call (:class:`StepSplit`, marked by the bench's model and tool as they are called): the
  model response's commit (with the call's intent), and the result's commit with the next
  model request's read.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.moto_server import moto_server
from bench.sqlite_steps import SessionDriver
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.records import MessageRecord, SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Tx
from fxdurable.stores.dynamodb import DynamoStore

__all__ = [
    "FEW",
    "LONG",
    "MANY",
    "SHORT",
    "DynamoStepFigures",
    "StepSplit",
    "measure_dynamodb",
    "measure_dynamodb_steps",
    "measure_journal_requests",
    "measure_runtime_requests",
    "measure_runtime_split",
    "prefill",
    "unavailable_reason",
]

FEW, MANY = 1, 4  # tool steps in the two turns whose requests are compared
SHORT, LONG = 10, 200  # earlier messages in the session
_BATCH = 90  # messages per prefill transaction (TransactWriteItems holds 100 items)


def prefill(store: DynamoStore, session_id: str, messages: int, agent: str = "bench") -> None:
    """A resting session of ``agent`` with ``messages`` earlier user/assistant messages."""
    done = 0
    while done < messages:
        count = min(_BATCH, messages - done)

        def body(tx: Tx, first: int = done + 1, count: int = count) -> None:
            session = tx.get_session(session_id)
            for seq in range(first, first + count):
                role = "user" if seq % 2 else "assistant"
                text = f"earlier {role} message {seq}"
                tx.append_message(
                    MessageRecord(
                        session_id=session_id, seq=seq, turn_id=f"old-{seq}", role=role, text=text
                    )
                )
            if session is None:
                fresh = SessionRecord(
                    id=session_id,
                    agent=agent,
                    status=SessionStatus.IDLE,
                    next_message_seq=first + count,
                    created_at=time.time(),
                )
                tx.put_session(fresh, expected_version=None)
            else:
                moved = replace(
                    session, next_message_seq=first + count, version=session.version + 1
                )
                tx.put_session(moved, expected_version=session.version)

        store.transact(body)
        done += count


@dataclass(slots=True)
class _Marks:
    """The store's request count when each model call and each tool call of a wake began."""

    store: DynamoStore
    model: list[int] = field(default_factory=list)
    tool: list[int] = field(default_factory=list)


def _marking_agent(tool_steps: int, marks: _Marks) -> Any:
    """``bench.runtime_turns.stepping_agent``'s turn, noting ``marks`` as it goes."""
    from bench.runtime_turns import ANSWER, LookupInput
    from fxdurable import Agent, ScriptedModel, ToolContext, call, reply
    from fxdurable.runtime.models.base import ModelRequest, ModelResponse
    from fxdurable.runtime.tools import define_tool

    script = [reply(f"Step {n}.", call("lookup", key=f"k{n}")) for n in range(tool_steps)]
    script.append(reply(ANSWER))

    def policy(_: ModelRequest) -> ModelResponse:
        marks.model.append(marks.store.requests)
        return script[min(len(marks.model), len(script)) - 1]

    async def lookup(inp: LookupInput, ctx: ToolContext) -> str:
        marks.tool.append(marks.store.requests)
        return f"{inp.key} = 42"

    tool = define_tool(
        "lookup", description="Look a key up.", input_model=LookupInput, execute=lookup
    )
    model = ScriptedModel(policy, chunk_size=64)
    return Agent("bench", model, instructions="Answer briefly.", tools=[tool])


async def _wake(store: DynamoStore, tool_steps: int, earlier: int) -> tuple[int, _Marks]:
    """Requests of the one wake that runs a turn of ``tool_steps`` tool steps, and its marks."""
    from bench.runtime_turns import ANSWER, SETTINGS
    from fxdurable import Runtime

    session_id = f"requests-{tool_steps}-{uuid.uuid4().hex[:8]}"
    prefill(store, session_id, earlier)
    marks = _Marks(store)
    # No consumer (concurrency=0) and timers far past the run: only the wake writes.
    async with Runtime(
        [_marking_agent(tool_steps, marks)], store=store, settings=SETTINGS, concurrency=0
    ) as rt:
        session = rt.session(session_id)
        sub = await session.submit("Look the keys up.")
        before = store.requests
        await rt.wake(session.id)
        requests = store.requests - before
        done = await session.submission(sub.id)
        if done is None or done.result != ANSWER:
            raise RuntimeError(f"the {tool_steps}-step bench turn did not complete: {done}")
        return requests, marks


def _wakes(
    open_store: Callable[[], DynamoStore], earlier: int
) -> tuple[tuple[int, _Marks], tuple[int, _Marks]]:
    def wake(tool_steps: int) -> tuple[int, _Marks]:
        store = open_store()
        try:
            return asyncio.run(_wake(store, tool_steps, earlier))
        finally:
            store.close()

    return wake(FEW), wake(MANY)


def measure_runtime_requests(open_store: Callable[[], DynamoStore], earlier: int) -> float:
    """DynamoDB requests of one tool step plus its model call through the Runtime, on a
    session with ``earlier`` messages before the turn."""
    (few, _), (many, _) = _wakes(open_store, earlier)
    return (many - few) / (MANY - FEW)


@dataclass(frozen=True, slots=True)
class StepSplit:
    """A runtime tool step's requests on either side of the tool call (means over the steps
    of a :data:`MANY`-step turn after its first, so what the first step reads cold is left
    out): ``model`` from the model request to the tool's start (the model response's commit
    with the call's intent), ``result`` from the tool's start to the next model request (the
    result's commit, and the model request's read)."""

    model: float
    result: float


def measure_runtime_split(open_store: Callable[[], DynamoStore], earlier: int) -> StepSplit:
    store = open_store()
    try:
        _, marks = asyncio.run(_wake(store, MANY, earlier))
    finally:
        store.close()
    steps = range(1, MANY)
    model = [marks.tool[k] - marks.model[k] for k in steps]
    result = [marks.model[k + 1] - marks.tool[k] for k in steps]
    return StepSplit(sum(model) / len(model), sum(result) / len(result))


def measure_journal_requests(store: DynamoStore) -> tuple[int, int]:
    """Requests of a journal model step and of a journal tool step, the session held."""
    journal = Journal(store, SystemClock(), RandomIds())
    driver = SessionDriver(journal, f"journal-{uuid.uuid4().hex[:8]}")
    driver.full_round()  # the store now holds the session as of its last commit
    before = store.requests
    (task,) = driver.model_step()
    model = store.requests - before
    driver.tool_step(task)
    return model, store.requests - before - model


@dataclass(frozen=True, slots=True)
class DynamoStepFigures:
    journal_model_step: int
    journal_tool_step: int
    runtime_tool_step: dict[int, float]  # earlier messages -> requests
    runtime_split: StepSplit  # at SHORT earlier messages

    def render(self) -> str:
        short, long = self.runtime_tool_step[SHORT], self.runtime_tool_step[LONG]
        split = self.runtime_split
        return "\n".join(
            [
                "DynamoDB store (moto server; requests are counted, not timed):",
                f"  journal model step (record_model_call)            {self.journal_model_step}",
                f"  journal tool step (start_tool + finish_tool)       {self.journal_tool_step}",
                f"  runtime tool step + its model call, {SHORT:>3} msgs      {short:g}",
                f"  runtime tool step + its model call, {LONG:>3} msgs      {long:g}",
                f"  runtime model step (its commit, with the intent)  {split.model:g}",
                f"  runtime tool result (its commit + the read)       {split.result:g}",
            ]
        )


def measure_dynamodb_steps(
    endpoint_url: str, *, session: Any = None, region: str = "us-east-1"
) -> DynamoStepFigures:
    """Every figure, each on a table of its own on the moto server at ``endpoint_url``."""

    def open_store() -> DynamoStore:
        table = f"fxd-bench-{uuid.uuid4().hex[:12]}"
        url = f"dynamodb://{table}?region={region}&endpoint_url={endpoint_url}"
        return DynamoStore(url, session=session)

    store = open_store()
    try:
        model, tool = measure_journal_requests(store)
    finally:
        store.close()
    runtime = {n: measure_runtime_requests(open_store, n) for n in (SHORT, LONG)}
    return DynamoStepFigures(model, tool, runtime, measure_runtime_split(open_store, SHORT))


def unavailable_reason() -> str | None:
    """Why the DynamoDB rows cannot be measured here (boto3 or moto missing), or None."""
    import importlib.util

    for module, extra in (("boto3", "fxdurable[aws]"), ("moto.server", "moto[server]")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module.split('.')[0]} is not installed (pip install '{extra}')"
    return None


def measure_dynamodb(
    tmp: Path, progress: Callable[[str], None]
) -> tuple[str, bool, DynamoStepFigures | None]:
    """The DynamoDB section of the report, whether measuring it failed (a skip is not a
    failure: the bench environment may lack boto3 and moto), and its figures if measured."""
    note = unavailable_reason()
    if note is not None:
        progress(f"DynamoDB rows skipped: {note}")
        return f"DynamoDB rows skipped: {note}", False, None
    directory = tmp / "moto"
    directory.mkdir(exist_ok=True)
    try:
        # The store takes boto3's own chain: the bench's moto wants only dummies.
        import boto3

        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        )
        with moto_server(directory) as endpoint_url:
            figures = measure_dynamodb_steps(endpoint_url, session=session)
    except Exception as exc:
        traceback.print_exc()
        return f"DynamoDB rows failed: {type(exc).__name__}: {exc}", True, None
    progress("DynamoDB requests per step counted")
    return figures.render(), False, figures
