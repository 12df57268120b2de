"""The PostgreSQL wake queue against a real server (tests/postgres_support.py): one pending
wake per session, delayed wakes on the database's clock, NOTIFY waking a blocked receive,
an idle consumer issuing no queries, the claim lease, dead-lettering after N deliveries, and
a terminated connection reconnected and LISTENing again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fxdurable.backends import open_queue
from fxdurable.errors import ConfigurationError, QueueUnavailableError
from fxdurable.queues._pg_queue_schema import parse_pg_queue_url
from fxdurable.queues.postgres import PgConsumer, PgMessage, PgQueue
from fxdurable.queues.wake_codec import decode_wake


@pytest.fixture
def queue(postgres_url: str) -> Iterator[PgQueue]:
    q = PgQueue(postgres_url)
    yield q
    q.close()


def _db(q: PgQueue) -> Any:
    return psycopg.connect(q.settings.conninfo, autocommit=True)


def _rows(q: PgQueue) -> list[tuple[Any, ...]]:
    with _db(q) as conn:
        rows: list[tuple[Any, ...]] = conn.execute(
            f'SELECT session_id, claim IS NOT NULL, dead, deliveries FROM "{q.settings.schema}"'
            ".fxd_wakes ORDER BY id"
        ).fetchall()
    return rows


def _wait(predicate: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_open_queue_and_url_errors(postgres_url: str) -> None:
    q = open_queue(postgres_url)
    assert isinstance(q, PgQueue) and q.delays_wakes
    assert "schema=" in q.url and "@" not in q.url  # no user or password in messages
    for bad in ("postgresql://h/db?schema=Bad-Name", "postgresql://h/db?max_deliveries=0"):
        with pytest.raises(ConfigurationError):
            parse_pg_queue_url(bad)


def test_duplicates_collapse_to_one_pending_wake_and_a_claimed_one_keeps_a_successor(
    queue: PgQueue,
) -> None:
    for _ in range(5):
        queue.send_now("s1", reason="r")
    queue.send_now("s2", reason="r")
    assert _rows(queue) == [("s1", False, False, 0), ("s2", False, False, 0)]
    consumer = PgConsumer(queue, wait_s=0)
    try:
        got = consumer.receive(10, visibility_s=30)
        assert sorted(decode_wake(m.body)[0] for m in got) == ["s1", "s2"]
        assert consumer.receive(10, visibility_s=30) == []  # claimed: not delivered twice
        # New work for s1 while its wake is handled: kept, as one more pending row.
        queue.send_now("s1", reason="again")
        queue.send_now("s1", reason="again")
        assert sorted(_rows(queue)) == [("s1", False, False, 0), ("s1", True, False, 1),
                                        ("s2", True, False, 1)]  # fmt: skip
        for m in got:
            assert consumer.delete(m)
            assert not consumer.delete(m)  # a second delete finds nothing
        (again,) = consumer.receive(10, visibility_s=30)
        assert decode_wake(again.body)[:2] == ("s1", "again")
    finally:
        consumer.close()


def test_a_delayed_wake_waits_on_the_database_clock_and_the_earliest_is_kept(
    queue: PgQueue,
) -> None:
    queue.send_now("s", reason="later", delay_s=3600)
    queue.send_now("s", reason="later", delay_s=7200)  # a later ask changes nothing
    consumer = PgConsumer(queue, wait_s=0)
    try:
        assert consumer.receive(1, visibility_s=30) == []
        with _db(queue) as conn:
            (due_in,) = conn.execute(
                f'SELECT extract(epoch FROM run_at - now()) FROM "{queue.settings.schema}"'
                ".fxd_wakes"
            ).fetchone()
        assert 3590 < float(due_in) <= 3600
        queue.send_now("s", reason="now")  # an earlier ask brings it forward
        (m,) = consumer.receive(1, visibility_s=30)
        assert decode_wake(m.body)[0] == "s" and len(_rows(queue)) == 1
    finally:
        consumer.close()


def test_enqueue_is_async_and_notify_wakes_a_blocked_receive_at_once(queue: PgQueue) -> None:
    consumer = PgConsumer(queue, wait_s=20)
    got: list[tuple[float, list[PgMessage]]] = []

    def receive() -> None:
        got.append((time.monotonic(), list(consumer.receive(1, visibility_s=30))))

    thread = threading.Thread(target=receive)
    thread.start()
    try:
        _wait(lambda: _listener(queue), "the receive to block on LISTEN")
        sent = time.monotonic()
        asyncio.run(queue.enqueue("s", reason="admitted"))
        thread.join(10)
    finally:
        consumer.close()
    ((at, messages),) = got
    assert [decode_wake(m.body)[0] for m in messages] == ["s"]
    assert at - sent < 1.0, at - sent  # woken by the NOTIFY, long before the 20 s safety poll


def test_an_idle_consumer_issues_no_queries_while_it_waits(queue: PgQueue) -> None:
    consumer = PgConsumer(queue, wait_s=20)
    thread = threading.Thread(target=consumer.receive, args=(1,), kwargs={"visibility_s": 30})
    thread.start()
    try:
        pid, started = _wait(lambda: _listener(queue), "the receive to block on LISTEN")
        # An observation window, not synchronisation: a polling consumer (DBOS's 1 s default)
        # would start a new statement within it.
        time.sleep(1.5)
        assert _listener(queue) == (pid, started)
        queue.send_now("s", reason="admitted")
        thread.join(10)
        assert not thread.is_alive()
    finally:
        consumer.close()


def _listener(q: PgQueue) -> tuple[int, Any] | None:
    """The (pid, query_start) of this queue's consumer while it waits on LISTEN."""
    with _db(q) as conn:
        row = conn.execute(
            "SELECT pid, query_start FROM pg_stat_activity WHERE application_name ="
            " 'fxdurable-queue' AND state = 'idle' AND query LIKE 'SELECT extract(epoch%%'"
            " AND query LIKE %s",
            (f"%{q.settings.schema}%",),
        ).fetchone()
    return (row[0], row[1]) if row else None


def test_an_unsettled_claim_is_delivered_again_once_its_lease_lapses(queue: PgQueue) -> None:
    queue.send_now("s", reason="r")
    consumer = PgConsumer(queue, wait_s=0)
    try:
        (first,) = consumer.receive(1, visibility_s=1)  # then "SIGKILLed": never deleted
        assert first.receive_count == 1
        assert consumer.extend(first, 1)  # the heartbeat works while the claim is ours
        second = _wait(lambda: consumer.receive(1, visibility_s=30), "the redelivery")[0]
        assert second.message_id == first.message_id and second.receive_count == 2
        assert not consumer.delete(first)  # the dead worker's claim no longer counts
        assert not consumer.extend(first, 30)
        assert consumer.delete(second) and _rows(queue) == []
    finally:
        consumer.close()


def test_a_wake_is_dead_lettered_after_max_deliveries(postgres_url: str) -> None:
    queue = PgQueue(f"{postgres_url}&max_deliveries=2")
    consumer = PgConsumer(queue, wait_s=0)
    try:
        queue.send_now("poison", reason="r")
        for n in (1, 2):
            (m,) = consumer.receive(1, visibility_s=30)
            assert m.receive_count == n
            assert consumer.extend(m, 0)  # failed: due again at once
        assert consumer.receive(1, visibility_s=30) == []
        assert _rows(queue) == [("poison", True, True, 2)]
        assert consumer.dead_lettered == [("poison", 2)]
        queue.send_now("poison", reason="new work")  # a dead wake does not block a new one
        (m,) = consumer.receive(1, visibility_s=30)
        assert decode_wake(m.body)[1] == "new work"
    finally:
        consumer.close()
        queue.close()


def test_a_terminated_connection_reconnects_and_listens_again(queue: PgQueue) -> None:
    consumer = PgConsumer(queue, wait_s=20)
    errors: list[BaseException] = []
    got: list[PgMessage] = []

    def receive() -> None:
        try:
            got.extend(consumer.receive(1, visibility_s=30))
        except BaseException as exc:
            errors.append(exc)

    try:
        thread = threading.Thread(target=receive)
        thread.start()
        pid, _ = _wait(lambda: _listener(queue), "the receive to block on LISTEN")
        with _db(queue) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(10)
        assert [type(e) for e in errors] == [QueueUnavailableError], errors
        thread = threading.Thread(target=receive)
        thread.start()
        _wait(lambda: (_listener(queue) or (pid,))[0] != pid, "a new LISTEN connection")
        queue.send_now("s", reason="after the reconnect")
        thread.join(10)
        assert [decode_wake(m.body)[0] for m in got] == ["s"]
        assert consumer.listener.opened == 2
    finally:
        consumer.close()


def test_a_sender_whose_connection_was_terminated_sends_on_a_new_one(queue: PgQueue) -> None:
    queue.send_now("s1", reason="r")
    with _db(queue) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name ="
            " 'fxdurable-queue' AND query LIKE %s",
            (f"%{queue.settings.schema}%",),
        )
    queue.send_now("s2", reason="r")  # the stale connection is replaced, the wake not lost
    assert [r[0] for r in _rows(queue)] == ["s1", "s2"]
