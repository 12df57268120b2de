"""A model backoff that outlasts an invocation (issue 11): the turn records when the wait ends,
the continuation's wake is delayed by it where the queue can delay one, and a wake that comes
early (the scan, a duplicate, a queue that cannot delay) never calls the model before then.

Real sleeps and real queues (the in-process one, SQS on the moto server): the assertions are
lower bounds on when the model is called again and counts of calls and attempts, never upper
bounds on time.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_support import REGION, aws_session
from fxrt_support import FAST, fresh_store, run

import fxdurable as fx
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.errors import ModelRetryableError
from fxdurable.queues.sqs import SqsQueue
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.models.base import Finish, ModelRequest, TextDelta
from fxdurable.runtime.models.scripted import ScriptedModel
from fxdurable.runtime.worker import WakeHandler

RETRY_AFTER_S = 1.5


class RateLimitedOnce:
    """Answers 429 with Retry-After first, then as scripted; notes when each call came."""

    def __init__(self, retry_after_s: float) -> None:
        self._inner = ScriptedModel([fx.reply("later")])
        self._retry_after_s = retry_after_s
        self.calls: list[float] = []

    @property
    def name(self) -> str:
        return "rate-limited-once"

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | Finish]:
        self.calls.append(time.monotonic())
        if len(self.calls) == 1:
            raise ModelRetryableError("429 Too Many Requests", retry_after_s=self._retry_after_s)
        async for part in self._inner.stream(request):
            yield part


def test_the_embedded_continuation_waits_out_retry_after(tmp_path: Path) -> None:
    """Budget 0.5 s, Retry-After 1.5 s: the invocation ends, the in-process queue holds the
    continuation back, and the scan's wakes (5 a second here) meanwhile call nothing."""
    model = RateLimitedOnce(RETRY_AFTER_S)

    async def go() -> None:
        async with fx.Runtime(
            [fx.Agent("a", model)],
            store=fresh_store(tmp_path),
            settings=FAST,
            rng=random.Random(7),
            invocation_budget_s=0.5,
        ) as rt:
            s = rt.session("s")
            assert await s.run("hi", timeout=30) == "later"
            yielded = [e.data["reason"] for e in await s.events() if e.type == "attempt.yielded"]
            assert yielded == ["model backoff"], "early wakes begin no attempt"

    run(go(), timeout=60)
    assert len(model.calls) == 2
    assert model.calls[1] - model.calls[0] >= RETRY_AFTER_S - 0.05, "Retry-After is a floor"


# -- SQS: the delayed continuation and a queue that cannot delay ------------------------------


@pytest.fixture
def sqs(moto_server: str) -> Iterator[Any]:
    client = aws_session().client("sqs", endpoint_url=moto_server)
    yield client
    client.close()


def queue_counts(sqs: Any, queue_url: str) -> tuple[int, int]:
    """(visible, delayed) messages."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    got = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return int(got[names[0]]), int(got[names[1]])


class Worker:
    """One session's wakes handled by a WakeHandler on SQS, as the SQS worker or the Lambda
    wake function does, with the journal on a SQLite file."""

    def __init__(self, tmp_path: Path, moto_server: str, model: RateLimitedOnce, fifo: bool):
        name = f"backoff-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
        self.url = f"sqs://{name}?region={REGION}&endpoint_url={moto_server}"
        self.queue_name = name
        self.store = fresh_store(tmp_path)
        self.journal = Journal(self.store, SystemClock(), RandomIds())
        self.queue = SqsQueue(self.url, session=aws_session())
        self.agent = fx.Agent("a", model)
        self.handler = WakeHandler(self.journal, self.queue, {"a": self.agent}, SystemClock(), FAST)

    async def admit(self) -> str:
        admission = self.journal.admit("s", agent="a", prompt="hi", request_id="r1")
        return admission.submission.id

    async def wake(self, budget_s: float) -> float:
        """Handle one wake with an invocation of ``budget_s``; how long it took."""
        started = time.monotonic()
        await self.handler.handle("s", InvocationBudget(budget_s))
        return time.monotonic() - started

    def status(self, submission_id: str) -> str:
        sub = self.journal.read(lambda v: v.get_submission(submission_id))
        assert sub is not None
        return str(sub.status)

    def attempts(self, submission_id: str) -> int:
        return len(self.journal.read(lambda v: v.attempts(submission_id)))


def test_on_a_standard_queue_the_continuation_is_a_delayed_message(
    tmp_path: Path, moto_server: str, sqs: Any
) -> None:
    model = RateLimitedOnce(30.0)
    worker = Worker(tmp_path, moto_server, model, fifo=False)
    queue_url = sqs.create_queue(QueueName=worker.queue_name)["QueueUrl"]

    async def go() -> None:
        sub = await worker.admit()
        await worker.wake(budget_s=5.0)
        assert len(model.calls) == 1 and worker.status(sub) == "running"
        assert queue_counts(sqs, queue_url) == (0, 2), "both continuation wakes delayed"
        # A wake that comes early (the scan's, a duplicate) ends at once: no model call, no
        # attempt begun, and another delayed continuation.
        took = await worker.wake(budget_s=5.0)
        assert took < 5.0
        assert len(model.calls) == 1 and worker.attempts(sub) == 1
        # One more delayed wake, not two: two per early wake would double the wakes in flight
        # at every wake that comes before a backoff past SQS's 900 s ends.
        assert queue_counts(sqs, queue_url) == (0, 3)
        await worker.queue.aclose()

    run(go(), timeout=60)


def test_a_queue_that_cannot_delay_sleeps_the_wait_out_instead_of_looping(
    tmp_path: Path, moto_server: str, sqs: Any
) -> None:
    """A FIFO queue has no per-message delay: each early wake sleeps what its invocation may
    (here 1 s of a 1.5 s wait), hands on an undelayed continuation, and the model is called
    only once the wait is over."""
    model = RateLimitedOnce(RETRY_AFTER_S)
    worker = Worker(tmp_path, moto_server, model, fifo=True)
    sqs.create_queue(QueueName=worker.queue_name, Attributes={"FifoQueue": "true"})

    async def go() -> None:
        sub = await worker.admit()
        await worker.wake(budget_s=1.0)
        assert len(model.calls) == 1
        wakes = 0
        while worker.status(sub) != "completed":
            wakes += 1
            assert wakes <= 5, "the backoff became a loop of wakes"
            await worker.wake(budget_s=1.0)
        assert model.calls[1] - model.calls[0] >= RETRY_AFTER_S - 0.05
        assert len(model.calls) == 2
        await worker.queue.aclose()

    run(go(), timeout=60)
