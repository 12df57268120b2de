"""A wake that meets a real store conflict runs again inside its invocation.

The wake function (Lambda's, in process) runs a story turn on DynamoDB (the serial moto
server) or Redis. Another writer plants a stray event item where the turn's next commit
appends its event, between that commit's reads and its write, without moving the session's
version (what the threaded moto server's torn transactions left behind, issue 22 §2): the
commit is refused with a :class:`~fxdurable.errors.ConflictError`, the only refusal that
reaches the wake (a moved version reruns the body inside the store). When the stray goes away
after the first refusal, the wake runs again from fresh reads in the same invocation: the
turn completes and no record of the batch is failed (no receive count towards the
dead-letter queue). When it never goes away, the wake runs a bounded number of times and the
function hands the session on as a fresh wake, naming the conflict, instead of failing the
record.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aws_lambda"))

from lambda_support import FakeContext, LambdaWorld, sqs_event

from fxdurable.aws_lambda.wake import WakeFunction
from fxdurable.backends import open_store
from fxdurable.core.recordcodec import encode
from fxdurable.core.records import EventRecord
from fxdurable.errors import ConflictError
from fxdurable.queues.sqs import decode_wake
from fxdurable.runtime import wake_conflicts
from tests.kit.story import done_text
from tests.kit.world import read_world

SESSION = "conflicted"


@dataclass
class Stray:
    """Plants a stray event at the session's next event seq inside the wake's next commit
    (after its reads); takes it away after ``clears_after`` refusals (None: never)."""

    plant: Callable[[int], None]
    remove: Callable[[int], None]
    clears_after: int | None
    armed: bool = False
    seq: int | None = None
    refused: int = 0
    runs: list[int] = field(default_factory=list)

    def wrap(self, store: Any, url: str) -> Callable[[], None]:
        """Wrap ``store.transact``; returns what closes the reader it opens on ``url``."""
        real = store.transact
        reader = open_store(url)

        def transact(body: Callable[[Any], Any]) -> Any:
            def planted(tx: Any) -> Any:
                result = body(tx)
                if self.armed and self.seq is None:
                    session = reader.read(lambda v: v.get_session(SESSION))
                    self.seq = session.next_event_seq
                    self.plant(self.seq)
                return result

            try:
                return real(planted)
            except ConflictError:
                self.refused += 1
                if self.clears_after is not None and self.refused == self.clears_after:
                    assert self.seq is not None
                    self.remove(self.seq)
                raise

        store.transact = transact
        return reader.close

    def arm(self, handler: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        """Count each run of ``handler``'s wakes and plant from the next commit on (the
        conflict pause shortened)."""
        real = handler.handle

        async def counted(session_id: str, budget: Any) -> bool:
            self.runs.append(1)
            return await real(session_id, budget)

        monkeypatch.setattr(handler, "handle", counted)
        monkeypatch.setattr(wake_conflicts, "_PAUSE_S", 0.001)
        self.armed = True


def _redis_stray(url: str) -> tuple[Callable[[int], None], Callable[[int], None]]:
    import redis

    prefix = parse_qs(urlsplit(url).query)["prefix"][0]
    client = redis.Redis.from_url(url.split("?")[0])
    key = f"{prefix}:events:{SESSION}"

    def plant(seq: int) -> None:
        stray = EventRecord(
            session_id=SESSION, seq=seq, type="stray", turn_id=None, data={}, at=time.time()
        )
        client.zadd(key, {encode(stray): seq})

    def remove(seq: int) -> None:
        client.zremrangebyscore(key, seq, seq)

    return plant, remove


def _dynamo_stray(url: str) -> tuple[Callable[[int], None], Callable[[int], None]]:
    from aws_support import aws_session

    where = urlsplit(url)
    query = parse_qs(where.query)
    client = aws_session().client("dynamodb", endpoint_url=query["endpoint_url"][0])
    table = where.netloc

    def key(seq: int) -> dict[str, Any]:
        return {"pk": {"S": f"S#{SESSION}"}, "sk": {"S": f"EV#{seq:012d}"}}

    def plant(seq: int) -> None:
        stray = EventRecord(
            session_id=SESSION, seq=seq, type="stray", turn_id=None, data={}, at=time.time()
        )
        client.put_item(TableName=table, Item={**key(seq), "b": {"S": encode(stray)}})

    def remove(seq: int) -> None:
        client.delete_item(TableName=table, Key=key(seq))

    return plant, remove


@pytest.fixture(params=[pytest.param("dynamodb", marks=pytest.mark.aws), "redis"])
def world(
    request: pytest.FixtureRequest,
    moto_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[LambdaWorld, Callable[[str], tuple[Any, Any]]]]:
    if request.param == "redis":
        pytest.importorskip("redis")
        world = LambdaWorld.create(moto_server, tmp_path)
        world.store_url = request.getfixturevalue("redis_url")
        stray = _redis_stray
    else:
        serial = request.getfixturevalue("serial_moto_server")
        world = LambdaWorld.create(
            moto_server, tmp_path, store="dynamodb", table_endpoint_url=serial
        )
        stray = _dynamo_stray
    for name, value in world.env().items():
        monkeypatch.setenv(name, value)
    yield world, stray
    world.close()


def _wake_with_stray(
    world: LambdaWorld,
    stray_of: Callable[[str], tuple[Any, Any]],
    clears_after: int | None,
    monkeypatch: pytest.MonkeyPatch,
    *,
    messages: list[dict[str, Any]] | None = None,
    stray: Stray | None = None,
) -> tuple[dict[str, Any], Stray, list[dict[str, Any]]]:
    """One invocation of the wake function, with the stray planted: for a fresh story, or for
    ``messages`` (what an earlier invocation handed on) with that invocation's ``stray``."""
    if messages is None:
        world.admit(SESSION, "story q", "req-q")
        messages = world.receive()
    assert len(messages) == 1
    function = WakeFunction.from_env()
    try:
        if stray is None:
            plant, remove = stray_of(world.store_url)
            stray = Stray(plant, remove, clears_after)
        close_reader = stray.wrap(function.store, world.store_url)
        stray.arm(function.handler, monkeypatch)
        answer = function(sqs_event(messages), FakeContext(60))
        close_reader()
    finally:
        function.close()
    world.delete(messages)
    return answer, stray, world.receive()


def test_a_conflict_that_clears_is_run_again_in_the_invocation(
    world: tuple[LambdaWorld, Callable[[str], tuple[Any, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    lambda_world, stray_of = world
    answer, stray, after = _wake_with_stray(lambda_world, stray_of, 1, monkeypatch)
    # The guard that the test is not vacuous, and that the planted event is the one refusal:
    # a held write refused as stale (the deploy's result written from the task as it was
    # before its progress report moved its version) would count a second.
    assert stray.refused == 1, "the planted event never conflicted, or a commit conflicted again"
    assert answer == {"batchItemFailures": []}  # no receive count burnt
    assert len(stray.runs) == 2  # the wake, and its run again from fresh reads
    state = read_world(lambda_world.store_url, lambda_world.world_dir)
    (done,) = state.submissions
    assert (done.status, done.result_text) == ("completed", done_text("q", "q"))
    assert after == []  # nothing handed on: the turn completed in this invocation


def test_a_conflict_that_never_clears_is_bounded_and_handed_on(
    world: tuple[LambdaWorld, Callable[[str], tuple[Any, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lambda_world, stray_of = world
    with caplog.at_level(logging.WARNING):
        answer, stray, after = _wake_with_stray(lambda_world, stray_of, None, monkeypatch)
    assert stray.refused == wake_conflicts.CONFLICT_RUNS
    assert len(stray.runs) == wake_conflicts.CONFLICT_RUNS
    assert answer == {"batchItemFailures": []}  # not failed: handed on instead
    (passed_on,) = after
    assert decode_wake(passed_on["Body"])[:2] == (SESSION, "after conflict 1 (submitted)")
    assert any("still conflicts" in r.getMessage() for r in caplog.records)


def test_a_conflict_that_outlives_its_fresh_wakes_fails_to_the_queue(
    world: tuple[LambdaWorld, Callable[[str], tuple[Any, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Handed on CONFLICT_HAND_ONS times, the next wake of a conflict that never clears fails
    its record: SQS redelivers it, and its receive count leads to the dead-letter queue."""
    lambda_world, stray_of = world
    answer, stray, after = _wake_with_stray(lambda_world, stray_of, None, monkeypatch)
    reasons = []
    for _ in range(wake_conflicts.CONFLICT_HAND_ONS):
        assert answer == {"batchItemFailures": []} and len(after) == 1, (answer, after)
        reasons.append(decode_wake(after[0]["Body"])[1])
        with caplog.at_level(logging.ERROR):
            answer, stray, after = _wake_with_stray(
                lambda_world, stray_of, None, monkeypatch, messages=after, stray=stray
            )
    assert reasons == [f"after conflict {n} (submitted)" for n in (1, 2, 3)]
    (failed,) = answer["batchItemFailures"]
    assert failed["itemIdentifier"]  # the last hand-on's record, left to redelivery
    assert after == []  # nothing handed on any more
    runs = wake_conflicts.CONFLICT_RUNS * (wake_conflicts.CONFLICT_HAND_ONS + 1)
    assert stray.refused == runs == len(stray.runs)
    assert any("after 3 fresh wakes" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("reason", "handed_on"),
    [
        ("submitted", "after conflict 1 (submitted)"),
        ("after conflict 1 (submitted)", "after conflict 2 (submitted)"),
        ("after conflict 2 (steer (a) b)", "after conflict 3 (steer (a) b)"),
        ("after conflict 3 (submitted)", None),
        ("after conflict x (submitted)", "after conflict 1 (after conflict x (submitted))"),
    ],
)
def test_the_hand_on_reason_counts_the_hand_ons(reason: str, handed_on: str | None) -> None:
    assert wake_conflicts.handed_on_reason(reason) == handed_on


def test_the_sqs_worker_hands_a_lasting_conflict_on_then_leaves_it_to_redelivery(
    world: tuple[LambdaWorld, Callable[[str], tuple[Any, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The SQS worker makes the wake function's decision (``handed_on_reason``): a conflict
    that never clears is handed on CONFLICT_HAND_ONS times as a fresh wake, then its message
    is left to redelivery (not deleted), so its receive count leads to the dead-letter
    queue."""
    from fxdurable.queues.sqs import SqsQueue
    from fxdurable.workers.config import WorkerConfig
    from fxdurable.workers.queue_settings import QueueWorkerSettings
    from fxdurable.workers.queue_worker import QueueWorker
    from fxdurable.workers.sqs_consumer import SqsConsumer
    from fxdurable.workers.sqs_worker import SQS
    from fxdurable.workers.warm import WarmContext

    lambda_world, stray_of = world
    lambda_world.admit(SESSION, "story q", "req-q")
    env = lambda_world.env()
    context = WarmContext(WorkerConfig(env["FXD_STORE"], env["FXD_QUEUE"], env["FXD_AGENTS"]))
    plant, remove = stray_of(lambda_world.store_url)
    stray = Stray(plant, remove, None)
    close_reader = stray.wrap(context.store, lambda_world.store_url)
    stray.arm(context.handler, monkeypatch)
    queue = context.queue
    assert isinstance(queue, SqsQueue)
    consumer = SqsConsumer(queue, wait_s=0)
    worker = QueueWorker(
        context,
        queue,
        consumer,
        QueueWorkerSettings(wait_s=0, visibility_s=30),
        backend=SQS,
        max_receives=None,
        burst=True,  # returns once a poll is empty: the last wake is invisible, retried later
        scan_interval_s=0,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="fxdurable.sqs"):
            assert context.run(worker.serve()) == 0
    finally:
        close_reader()
        consumer.close()
        context.close()
    passed_on = [
        r.getMessage() for r in caplog.records if "passed on as a fresh wake" in r.getMessage()
    ]
    assert len(passed_on) == wake_conflicts.CONFLICT_HAND_ONS, passed_on
    assert any("after 3 fresh wakes" in r.getMessage() for r in caplog.records)
    runs = wake_conflicts.CONFLICT_RUNS * (wake_conflicts.CONFLICT_HAND_ONS + 1)
    assert stray.refused == runs == len(stray.runs)
    # The last hand-on's message is not deleted: it comes back after its retry delay (2 s on
    # its first delivery), the only message left.
    (left,) = lambda_world.receive(wait_s=10)
    assert decode_wake(left["Body"])[1] == "after conflict 3 (submitted)"
    assert int(left["Attributes"]["ApproximateReceiveCount"]) == 2
