"""``fxdurable worker --queue postgresql://`` end to end: real worker processes on the test
run's PostgreSQL, a SQLite store file shared by them.

A turn with tools and a next message, then SIGTERM (exit 0); 3 workers and 30 turns, each
settling exactly once (SKIP LOCKED: no wake handled twice at once); a worker SIGKILLed mid-tool
whose wake is delivered again; ``fxdurable scan`` finding a session whose wake was lost; and
PostgreSQL itself SIGKILLed and restarted under running turns; a worker on a Postgres store
and queue where boto3 cannot be imported; and a worker's store connections terminated
(``pg_terminate_backend``) with one of its transactions open.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from crash_cases import REQUEST, SESSION, STORY, assert_story_completed, assert_unknown_deploy
from postgres_queue_support import PgHarness
from psycopg import sql
from worker_support import print_measure, wait_until

from fxdurable.stores._pg_connect import parse_pg_url
from tests.kit.story import done_text
from tests.kit.world import assert_invariants


def test_a_turn_with_tools_a_next_message_and_sigterm(
    make_pg_harness: Callable[..., PgHarness],
) -> None:
    h = make_pg_harness()
    h.start_worker()
    sub_id = h.submit_one("s", "story pg", "r1")
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed" and sub.result_text == done_text("pg"), sub
    next_id = h.submit_one("s", "status?", "r2")
    (sub,) = h.wait_settled([next_id], timeout=30)
    assert sub.status == "completed", sub
    # An idle worker blocked on LISTEN (20 s safety poll) stops at SIGTERM at once: the
    # stop interrupts its wait with a NOTIFY on its own channel.
    stopping = time.monotonic()
    assert h.stop_workers(timeout=30) == [0], h.diagnostics()
    assert time.monotonic() - stopping < 10, "the stop waited for the safety poll"
    wait_until(lambda: h.depth() == 0, 10, "every wake deleted")


def test_three_workers_thirty_turns_each_settles_exactly_once(
    make_pg_harness: Callable[..., PgHarness],
) -> None:
    h = make_pg_harness()
    h.start_workers(3)
    items = [(f"s{i}", f"story t{i}", f"r{i}") for i in range(30)]
    started = time.monotonic()
    ids = h.submit(items, extra_wakes=[1] * 30)  # every wake twice: duplicates are harmless
    subs = h.wait_settled(ids, timeout=120)
    print_measure("30 turns on 3 Postgres-queue workers", time.monotonic() - started)
    assert [s.status for s in subs] == ["completed"] * 30, subs
    # A submission settles a moment before its worker lets the lease go: the invariants (no
    # lease left at rest) are read once every wake is deleted and the workers have stopped.
    wait_until(lambda: h.depth() == 0, 30, "every wake deleted")
    logs = "".join(w.log() for w in h.workers)
    assert all(f"wake s{i} (" in logs for i in range(30))
    assert h.stop_workers(timeout=30) == [0, 0, 0], h.diagnostics()
    assert_invariants(h.world(), [r for _, _, r in items])


def test_a_worker_sigkilled_mid_tool_is_recovered_by_redelivery(
    make_pg_harness: Callable[..., PgHarness],
) -> None:
    h = make_pg_harness(lease_ttl_s=30.0)
    first = h.start_worker(env={"FXD_TEST_DEPLOY_S": "5"}, scan_interval_s=0)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_tool_running(SESSION, "deploy")
    first.kill()
    killed_at = time.time()
    survivor = h.start_worker(scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    print_measure(
        "Postgres-queue recovery after SIGKILL mid-tool", (sub.settled_at or 0) - killed_at
    )
    wait_until(lambda: ", delivery 2" in survivor.log(), 30, "the redelivery")
    world = h.world()
    assert_invariants(world, [REQUEST])
    assert_unknown_deploy(world, deploys=0, calls=1)
    assert world.attempt_pids(REQUEST) == [first.pid, survivor.pid]


def test_fxdurable_scan_wakes_a_session_whose_wake_was_lost(
    make_pg_harness: Callable[..., PgHarness],
) -> None:
    h = make_pg_harness()
    sub_id = h.submit_one("s", "story scan", "r1")
    assert h.depth() == 1
    h.sql("DELETE FROM {s}.fxd_wakes")  # the wake is lost; the store still has the work
    code, out, err = h.run_cli("scan")
    assert code == 0 and "woke 1 session(s)" in out, (out, err)
    assert h.sql("SELECT session_id, reason FROM {s}.fxd_wakes") == [("s", "reconcile")]
    h.start_worker(scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed", sub


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_postgres_sigkilled_and_restarted_mid_run_loses_and_duplicates_nothing(
    make_pg_harness: Callable[..., PgHarness], postgres_factory: Callable[..., Any], store: str
) -> None:
    """The queue on a server of the test's own, SIGKILLed (postmaster and backends) while 3
    workers run 30 turns, then restarted from its WAL; with ``postgres`` the store is on it
    too (the Postgres pair: every commit in flight is lost or kept whole)."""
    server = postgres_factory()
    url = f"{server.url}?schema=fxq"
    h = make_pg_harness(pg_url=url, store_url=url if store == "postgres" else None)
    workers = h.start_workers(3, env={"FXD_TEST_DEPLOY_S": "0.3"})
    items = [(f"s{i}", f"story t{i}", f"r{i}") for i in range(30)]
    ids = h.submit(items)
    h.wait_event("s0", lambda e: e.type == "tool.started")
    server.kill()
    server.start()  # WAL recovery; the workers' connections are gone
    subs = h.wait_settled(ids, timeout=180)
    assert [s.status for s in subs] == ["completed"] * 30, h.diagnostics()
    logs = "".join(w.log() for w in workers)
    assert "Postgres queue" in logs and "unavailable" in logs, logs[-3000:]
    wait_until(lambda: h.depth() == 0, 60, "every wake deleted")
    assert h.stop_workers(timeout=30) == [0, 0, 0], h.diagnostics()
    # Read once the workers have stopped: a submission settles a moment before its worker
    # lets the lease go (as in the thirty-turns test above).
    assert_invariants(h.world(), [r for _, _, r in items])


# A sitecustomize that makes every import of boto3 or botocore fail, and notes each attempt
# (an import tried and swallowed counts too), so "imports nothing of boto3" is observed in the
# running worker, not read off its source.
_NO_AWS = """
import importlib.abc, os, sys

_LOG = os.environ["FXD_TEST_IMPORT_LOG"]


def _note(line):
    with open(_LOG, "a") as f:
        f.write(line + "\\n")


class _NoAws(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("boto3", "botocore"):
            _note(name)
            raise ImportError(f"{name} is not installed here (a test: no fxdurable[aws])")
        return None


sys.meta_path.insert(0, _NoAws())
_note("blocker loaded")
"""


def test_a_postgres_worker_runs_turns_where_boto3_cannot_be_imported(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str, tmp_path: Path
) -> None:
    """The store and the queue on Postgres, boto3 and botocore unimportable in every process
    started: a worker runs a turn with tools, ``fxdurable scan`` runs, and neither even tries
    to import them; an SQS worker under the same blocker fails on it (the blocker bites)."""
    h = make_pg_harness(store_url=postgres_url)
    blocker = tmp_path / "no_aws"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_NO_AWS)
    log = tmp_path / "imports.log"
    env = {
        "PYTHONPATH": os.pathsep.join([str(blocker), h.env()["PYTHONPATH"]]),
        "FXD_TEST_IMPORT_LOG": str(log),
    }
    h.start_worker(env=env)
    sub_id = h.submit_one("s", "story pg", "r1")
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed" and sub.result_text == done_text("pg"), sub
    code, out, err = h.run_cli("scan", env=env)
    assert code == 0 and "woke" in out, (out, err)
    assert h.stop_workers(timeout=30) == [0], h.diagnostics()
    assert log.read_text().splitlines() == ["blocker loaded"] * 2, log.read_text()

    log.unlink()
    code, out, err = h.run_cli("worker", "--queue", "sqs://wakes?region=us-east-1", env=env)
    assert code != 0 and "boto3" in log.read_text(), (code, out, err, log.read_text())


STORE_APP = "fxd-store-under-test"  # the worker's store pool connections, by application_name


def test_a_worker_whose_store_connections_are_terminated_mid_transaction_completes_once(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str
) -> None:
    """``pg_terminate_backend`` of a running worker's store connections, one of them inside a
    transaction: while the deploy runs, the test holds every store table in ``EXCLUSIVE``
    mode (reads go on, writes wait), so the worker's next write transaction (the heartbeat's
    or the deploy's result) is caught open, waiting on the lock; then every connection of the
    worker's store pool (and of this test's reads, on the same URL) is terminated and the lock
    let go. The store runs the transaction again on a new connection, unseen by the worker
    (no failure logged): the turn completes once, the deploy ran once, and ``fxdurable check``
    finds every invariant holding."""
    store_url = f"{postgres_url}&application_name={STORE_APP}"
    h = make_pg_harness(store_url=store_url, lease_ttl_s=30.0)
    worker = h.start_worker(env={"FXD_TEST_DEPLOY_S": "1"}, scan_interval_s=0)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_tool_running(SESSION, "deploy")
    settings = parse_pg_url(postgres_url)
    # Two connections: the lock's transaction, and the watcher, which must not be in it (a
    # transaction reads pg_stat_activity once and keeps that snapshot until it ends).
    with (
        psycopg.connect(settings.conninfo, autocommit=True) as locker,
        psycopg.connect(settings.conninfo, autocommit=True) as watcher,
    ):
        tables = [
            name
            for (name,) in locker.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                " AND table_name NOT LIKE 'fxd\\_%%'",  # the queue's tables: its wakes go on
                (settings.schema,),
            )
        ]
        with locker.transaction():
            locker.execute(
                sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
                    sql.SQL(", ").join(sql.Identifier(settings.schema, t) for t in tables)
                )
            )
            waiting = wait_until(
                lambda: watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                    " AND wait_event_type = 'Lock' AND state = 'active'",
                    (STORE_APP,),
                ).fetchall(),
                30,
                "a store transaction of the worker waiting on the lock",
            )
            terminated = watcher.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (STORE_APP,),
            ).fetchall()
    assert set(waiting) <= {(pid,) for pid, _ in terminated}, (waiting, terminated)
    assert all(ok for _, ok in terminated), terminated
    (sub,) = h.wait_settled([sub_id], timeout=60)
    assert sub.status == "completed", h.diagnostics()
    assert h.stop_workers(timeout=30) == [0], h.diagnostics()
    world = h.world()
    assert_invariants(world, [REQUEST])
    assert_story_completed(world, interruptions=0)
    assert len(world.calls_of("deploy")) == 1  # ran once: the terminated commit was not lost
    # The store ran the caught transaction (the lease renewal's, as it happens) again itself:
    # the worker never saw it fail (its own retry would log "lease renewal ... failed"). The
    # pool's "discarding closed connection" warnings are the terminated idle ones.
    failed = [
        line
        for line in worker.log().splitlines()
        if line.startswith(("ERROR", "WARNING fxdurable.worker"))
    ]
    assert failed == [], failed
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0 and "every invariant holds" in out, (code, out, err)
