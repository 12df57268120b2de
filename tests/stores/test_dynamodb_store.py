"""The DynamoDB store's specifics on a moto server: its URL, opening, S3 offload, fencing,
concurrent writers, crashes between the S3 put and the commit, and throttling. The store
contract itself runs in test_store_contract.py; requests per step in test_dynamodb_steps.py."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aws_support import REGION, aws_environment, aws_session
from dynamo_support import dynamo_url, new_bucket

from fxdurable.backends import open_store
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import ToolCallRequest, ToolTaskRecord, TurnRecord, Usage
from fxdurable.core.states import ToolTaskStatus, TurnStatus
from fxdurable.errors import (
    ConfigurationError,
    LeaseLostError,
    StoreError,
    StoreUnavailableError,
)
from fxdurable.stores._ddb_settings import parse_url
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing import FakeClock
from tests.stores.test_redis_store import CountingIds, _race, gap_free, violations

pytestmark = pytest.mark.aws

T0 = 1_000.0
TTL = 30.0
MB = 1024 * 1024
WORKER_A = WorkerIdentity(host="host-a", pid=1)
WORKER_B = WorkerIdentity(host="host-b", pid=2)


def opened(url: str, **kw: Any) -> DynamoStore:
    return DynamoStore(url, session=aws_session(), **kw)


@pytest.fixture
def url(moto_server: str) -> str:
    return dynamo_url(moto_server)


@pytest.fixture
def store(url: str) -> Iterator[DynamoStore]:
    s = opened(url)
    yield s
    s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def table_items(url: str) -> list[dict[str, Any]]:
    """Every item of the store's table, as DynamoDB holds it (a test may Scan)."""
    settings = parse_url(url)
    client = aws_session().client("dynamodb", endpoint_url=settings.endpoint_url)
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"TableName": settings.table, "ConsistentRead": True}
    while True:
        page = client.scan(**params)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def bucket_keys(endpoint_url: str, bucket: str) -> list[str]:
    s3 = aws_session().client("s3", endpoint_url=endpoint_url)
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def running_tool(journal: Journal, sid: str = "s1") -> tuple[Fence, ToolTaskRecord]:
    """A session whose turn has one tool task started (``running``)."""
    sub = journal.admit(sid, agent="a", prompt="go").submission
    fence = journal.claim(sid, WORKER_A, ttl_s=TTL)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="a")
    call = ToolCallRequest(name="dump", arguments="{}")
    (task,) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=(call,), policies=("safe",), usage=Usage()
    ).tasks
    return fence, journal.start_tool(fence, task.id).task


# -- the URL and opening ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("dynamodb://", "not a DynamoDB table name"),
        ("dynamodb://t", "not a DynamoDB table name"),
        ("dynamodb://table/extra", "not a DynamoDB table name"),
        ("dynamodb://table?colour=red", r"unknown DynamoDB URL options \['colour'\]"),
        ("dynamodb://table?endpoint_url=ftp://h", "endpoint_url must be an http"),
        ("dynamodb://table?bucket=Not_A_Bucket", "not an S3 bucket name"),
        ("dynamodb://table?offload_threshold=big", "offload_threshold must be a whole number"),
        ("dynamodb://table?offload_threshold=500000", "offload_threshold must be 1 to 350000"),
        ("dynamodb://table?retry_budget_s=-1", "retry_budget_s must be 0 to 300"),
    ],
)
def test_a_bad_url_is_refused_with_what_is_wrong(given: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        parse_url(given)


def test_open_store_picks_dynamodb(
    url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for var, value in aws_environment(tmp_path).items():
        monkeypatch.setenv(var, value)
    store = open_store(url)
    try:
        assert isinstance(store, DynamoStore) and store.url == url
        assert store.read(lambda v: v.get_session("nobody")) is None
    finally:
        store.close()


def test_a_read_only_open_refuses_a_missing_table_and_creates_nothing(moto_server: str) -> None:
    url = dynamo_url(moto_server)
    with pytest.raises(StoreError, match="no DynamoDB table"):
        opened(url, create=False)
    client = aws_session().client("dynamodb", endpoint_url=moto_server)
    assert parse_url(url).table not in client.list_tables()["TableNames"]


def test_opening_an_existing_store_is_one_get_item(url: str) -> None:
    """What a Lambda cold start pays: the schema marker's GetItem, no DescribeTable."""
    opened(url).close()  # creates the table and writes the marker
    for create in (True, False):
        store = opened(url, create=create)
        assert store.requests == 1
        store.close()


def test_a_foreign_layout_version_is_refused(url: str) -> None:
    opened(url).close()
    settings = parse_url(url)
    client = aws_session().client("dynamodb", endpoint_url=settings.endpoint_url)
    client.put_item(
        TableName=settings.table,
        Item={"pk": {"S": "#SCHEMA"}, "sk": {"S": "#"}, "v": {"N": "99"}},
    )
    with pytest.raises(StoreError, match="layout version 99"):
        opened(url, create=False)


def test_a_read_view_cannot_write_and_a_closed_store_refuses(store: DynamoStore) -> None:
    from fxdurable.testing.store_contract.builders import a_session

    with pytest.raises(TypeError, match="read view cannot write"):
        store.read(lambda v: v.put_session(a_session(), expected_version=None))  # type: ignore[attr-defined]
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.read(lambda v: v.get_session("s1"))


def test_ids_with_hashes_do_not_collide(store: DynamoStore) -> None:
    """A turn's tasks are one sort-key range; a turn id that extends another with ``#``
    must not fall inside it."""
    from fxdurable.testing.store_contract.builders import a_task

    def body(tx: Any) -> None:
        tx.put_tool_task(a_task("a", 0, 0), expected_version=None)
        tx.put_tool_task(a_task("a#000000000000", 0, 0), expected_version=None)

    store.transact(body)
    assert [t.turn_id for t in store.read(lambda v: v.tool_tasks("a"))] == ["a"]
    assert [t.turn_id for t in store.read(lambda v: v.tool_tasks("a", 0))] == ["a"]


# -- S3 offload ------------------------------------------------------------------------------


def test_a_one_megabyte_tool_output_round_trips_through_s3(moto_server: str) -> None:
    bucket = new_bucket(moto_server)
    url = dynamo_url(moto_server, offload_threshold=64 * 1024, bucket=bucket)
    store = opened(url)
    try:
        journal = Journal(store, FakeClock(T0), CountingIds())
        fence, task = running_tool(journal)
        output = "".join(f"line {n:07d}\n" for n in range(MB // 13 + 1))
        assert len(output) > MB
        journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, output)
    finally:
        store.close()
    fresh = opened(url)  # holds nothing: reads the item and resolves its S3 reference
    try:
        back = fresh.read(lambda v: v.get_tool_task(task.id))
        assert back is not None and back.result == output
    finally:
        fresh.close()
    keys = bucket_keys(moto_server, bucket)
    task_item = next(i for i in table_items(url) if i["sk"]["S"].startswith("TASK#"))
    assert "b" not in task_item  # the item holds the reference only
    digest = task_item["o"]["S"]
    assert f"fxd-blobs/sha256/{digest}" in keys
    assert all(len(json.dumps(i)) < 64 * 1024 for i in table_items(url))


def test_without_a_bucket_an_oversized_record_names_the_option_and_writes_nothing(
    store: DynamoStore, url: str
) -> None:
    journal = Journal(store, FakeClock(T0), CountingIds())
    fence, task = running_tool(journal)
    before = table_items(url)
    with pytest.raises(StoreError, match=r"\?bucket="):
        journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "x" * MB)
    assert table_items(url) == before
    journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "small")  # still usable


CRASH_SCRIPT = """
import sys
sys.path[:0] = {paths!r}
from aws_support import aws_session
from fxdurable.core.journal import Journal
from fxdurable.core.states import ToolTaskStatus
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing import FakeClock
from tests.stores.test_dynamodb_store import CountingIds, T0, running_tool
store = DynamoStore({url!r}, session=aws_session())
journal = Journal(store, FakeClock(T0), CountingIds())
fence, task = running_tool(journal)
print(fence.token, task.id, flush=True)
journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, {output!r})
print("committed", flush=True)
"""


@pytest.mark.crash
def test_a_crash_between_the_s3_put_and_the_commit_leaves_a_consistent_store(
    moto_server: str,
) -> None:
    """SIGKILL after the record is in S3 and before the transaction naming it: the object is
    an orphan nothing references, the task is still ``running``, the store passes the
    invariant checks, and the same write later commits onto the same object."""
    bucket = new_bucket(moto_server)
    url = dynamo_url(moto_server, offload_threshold=1024, bucket=bucket)
    output = "result " * 1000
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = CRASH_SCRIPT.format(
        paths=[tests_dir, os.path.dirname(tests_dir)], url=url, output=output
    )
    env = {**os.environ, "FXD_CRASH_AT": "store.after-offload"}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr
    assert "crash injected at store.after-offload" in proc.stderr
    token, task_id = proc.stdout.split()[:2]
    assert "committed" not in proc.stdout

    # The task's record and its tool.settled event (which carries the result) are in S3.
    orphans = bucket_keys(moto_server, bucket)
    assert len(orphans) == 2 and all(k.startswith("fxd-blobs/sha256/") for k in orphans)
    referenced = {i["o"]["S"] for i in table_items(url) if "o" in i}
    assert not referenced & {k.rsplit("/", 1)[1] for k in orphans}

    store = opened(url)
    try:
        task = store.read(lambda v: v.get_tool_task(task_id))
        assert task is not None and task.status == ToolTaskStatus.RUNNING
        assert [v for v in violations(store) if "running" not in v] == []
        journal = Journal(store, FakeClock(T0), CountingIds())
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None and session.lease.token == int(token)
        fence = Fence(session_id="s1", owner=session.lease.owner or "", token=int(token))
        journal.finish_tool(fence, task_id, ToolTaskStatus.COMPLETED, output)
        back = store.read(lambda v: v.get_tool_task(task_id))
        assert back is not None and back.result == output
    finally:
        store.close()
    assert bucket_keys(moto_server, bucket) == orphans  # the same object, now referenced


# -- fencing and concurrent writers ----------------------------------------------------------


def test_a_stale_fence_leaves_every_item_unchanged(url: str, clock: FakeClock) -> None:
    """Worker A's store holds the session; B takes the lease over through another store.
    Each of A's transitions then fails on the stale token and writes nothing."""
    a, b = opened(url), opened(url)
    try:
        ja = Journal(a, clock, CountingIds())
        jb = Journal(b, clock, CountingIds())
        sub = ja.admit("s1", agent="a", prompt="go").submission
        old = ja.claim("s1", WORKER_A, ttl_s=TTL)
        assert old is not None
        start = ja.begin_attempt(old, sub.id, worker="a")
        clock.advance(TTL + 1)
        new = jb.claim("s1", WORKER_B, ttl_s=TTL)
        assert new is not None and new.token == old.token + 1
        before = table_items(url)
        stale: list[Callable[[], object]] = [
            lambda: ja.heartbeat(old, ttl_s=TTL),
            lambda: ja.record_model_call(
                old,
                start.turn.id,
                round_=0,
                text="zombie",
                tool_calls=[],
                policies=[],
                usage=Usage(),
            ),
            lambda: ja.settle(old, sub.id, "completed", text="zombie"),
        ]
        for write in stale:
            with pytest.raises(LeaseLostError):
                write()
            assert table_items(url) == before
        assert ja.release(old) is False
        assert table_items(url) == before
    finally:
        a.close()
        b.close()


def test_concurrent_writers_keep_the_event_sequence_gap_free(
    serial_moto_server: str, clock: FakeClock
) -> None:
    """Four stores steer one session at once, three times each (16 may wait): every steer
    lands, and the events stay 1..n without a gap or a duplicate."""
    n = 4
    url = dynamo_url(serial_moto_server)
    stores = [opened(url) for _ in range(n)]
    journals = [Journal(s, clock, CountingIds()) for s in stores]
    try:
        sub = journals[0].admit("s1", agent="a", prompt="go").submission
        fence = journals[0].claim("s1", WORKER_A, ttl_s=TTL)
        assert fence is not None
        journals[0].begin_attempt(fence, sub.id, worker="a")

        def steer_three(i: int) -> int:
            return sum(journals[i].steer("s1", f"w{i}-{k}").steered for k in range(3))

        assert _race(n, steer_three) == [3] * n
        events = gap_free(journals[0], "s1")
        assert sum(e.type == "steer.recorded" for e in events) == 3 * n
        session = journals[0].read(lambda v: v.get_session("s1"))
        assert session is not None and len(session.steering) == 3 * n
    finally:
        for s in stores:
            s.close()


def test_racing_admissions_of_one_request_id_admit_it_once(serial_moto_server: str) -> None:
    n = 4
    url = dynamo_url(serial_moto_server)
    stores = [opened(url) for _ in range(n)]
    journals = [Journal(s, FakeClock(T0), CountingIds()) for s in stores]
    try:
        admissions = _race(
            n, lambda i: journals[i].admit("s1", agent="a", prompt="p", request_id="same")
        )
        assert sum(a.created for a in admissions) == 1
        assert len({a.submission.id for a in admissions}) == 1
        assert len(journals[0].read(lambda r: r.submissions("s1"))) == 1
        gap_free(journals[0], "s1")
        assert violations(stores[0]) == []
    finally:
        for s in stores:
            s.close()


def test_a_turn_written_elsewhere_is_read_fresh(url: str) -> None:
    """A store that read a turn sees another store's update of it at its next read."""
    a, b = opened(url), opened(url)
    try:
        turn = TurnRecord(id="t1", session_id="s1", submission_id="x", status=TurnStatus.RUNNING)
        a.transact(lambda tx: tx.put_turn(turn, expected_version=None))
        assert a.read(lambda v: v.get_turn("t1")) == turn
        moved = TurnRecord(
            id="t1",
            session_id="s1",
            submission_id="x",
            status=TurnStatus.RUNNING,
            rounds=1,
            version=2,
        )
        b.transact(lambda tx: tx.put_turn(moved, expected_version=1))
        assert a.read(lambda v: v.get_turn("t1")) == moved
    finally:
        a.close()
        b.close()


# -- throttling ------------------------------------------------------------------------------


class _Throttling(http.server.BaseHTTPRequestHandler):
    """A DynamoDB endpoint that throttles every request (and counts them)."""

    seen = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen += 1
        body = json.dumps(
            {
                "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                "message": "Rate of requests exceeds the allowed throughput.",
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_throttling_is_retried_then_surfaced_as_unavailable() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Throttling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    url = f"dynamodb://fxd-{uuid.uuid4().hex[:8]}?region={REGION}&endpoint_url={endpoint}"
    try:
        with pytest.raises(StoreUnavailableError, match="kept failing") as caught:
            opened(url + "&retry_budget_s=1")
        assert not isinstance(caught.value.cause, StoreError)
        # botocore's standard mode tries at most 3 times per call: more is the store
        # calling again after botocore gave up.
        assert _Throttling.seen > 3
    finally:
        server.shutdown()
        server.server_close()
