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
  messages, which must cost the same. ``runtime model step`` is the runtime tool step less the
  journal tool step: the model call's commit and the read before it.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
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
    "measure_dynamodb",
    "measure_dynamodb_steps",
    "measure_journal_requests",
    "measure_runtime_requests",
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


async def _wake_requests(store: DynamoStore, tool_steps: int, earlier: int) -> int:
    """Requests of the one wake that runs a turn of ``tool_steps`` tool steps."""
    from bench.runtime_turns import ANSWER, SETTINGS, stepping_agent
    from fxdurable import Runtime

    session_id = f"requests-{tool_steps}-{uuid.uuid4().hex[:8]}"
    prefill(store, session_id, earlier)
    # No consumer (concurrency=0) and timers far past the run: only the wake writes.
    async with Runtime(
        [stepping_agent(tool_steps)], store=store, settings=SETTINGS, concurrency=0
    ) as rt:
        session = rt.session(session_id)
        sub = await session.submit("Look the keys up.")
        before = store.requests
        await rt.wake(session.id)
        requests = store.requests - before
        done = await session.submission(sub.id)
        if done is None or done.result != ANSWER:
            raise RuntimeError(f"the {tool_steps}-step bench turn did not complete: {done}")
        return requests


def measure_runtime_requests(open_store: Callable[[], DynamoStore], earlier: int) -> float:
    """DynamoDB requests of one tool step plus its model call through the Runtime, on a
    session with ``earlier`` messages before the turn."""

    def wake(tool_steps: int) -> int:
        store = open_store()
        try:
            return asyncio.run(_wake_requests(store, tool_steps, earlier))
        finally:
            store.close()

    few, many = wake(FEW), wake(MANY)
    return (many - few) / (MANY - FEW)


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

    @property
    def runtime_model_step(self) -> float:
        return self.runtime_tool_step[SHORT] - self.journal_tool_step

    def render(self) -> str:
        short, long = self.runtime_tool_step[SHORT], self.runtime_tool_step[LONG]
        return "\n".join(
            [
                "DynamoDB store (moto server; requests are counted, not timed):",
                f"  journal model step (record_model_call)        {self.journal_model_step}",
                f"  journal tool step (start_tool + finish_tool)   {self.journal_tool_step}",
                f"  runtime tool step + its model call, {SHORT:>3} msgs  {short:g}",
                f"  runtime tool step + its model call, {LONG:>3} msgs  {long:g}",
                f"  runtime model step (commit + its read)         {self.runtime_model_step:g}",
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
    return DynamoStepFigures(model, tool, runtime)


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


def measure_dynamodb(tmp: Path, progress: Callable[[str], None]) -> tuple[str, bool]:
    """The DynamoDB section of the report, and whether measuring it failed (a skip is not a
    failure: the bench environment may lack boto3 and moto)."""
    note = unavailable_reason()
    if note is not None:
        progress(f"DynamoDB rows skipped: {note}")
        return f"DynamoDB rows skipped: {note}", False
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
        return f"DynamoDB rows failed: {type(exc).__name__}: {exc}", True
    progress("DynamoDB requests per step counted")
    return figures.render(), False
