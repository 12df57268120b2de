"""Fixtures of the RQ worker tests: a Redis of their own, a fresh database per test, a store
per backend, and :class:`~rq_support.RqHarness` (real ``fxdurable worker`` processes).

``rq_redis`` starts one ``redis-server`` for the session, with its append-only file on
(``--appendonly yes --appendfsync everysec``, no RDB snapshots): it holds the Redis stores of
these tests too, and the Redis store refuses a server that would lose its commits on a
restart. It is skipped when ``redis-server`` is not installed, except with ``CI=true``, where
that fails.

``store_url`` is parametrised by backend, like the crash suite's: every test runs on SQLite
(workers on one host sharing a file) and on the Redis store (a database of its own per test on
this same server), the deployment the issue asks for. ``FXD_TEST_WORKER_STORES=sqlite`` (or
``redis``) narrows it for a quick local run.

The SQS worker tests use ``make_sqs_harness`` (:class:`~sqs_support.SqsHarness`: a queue of
their own on the run's moto server) on ``sqs_store_url``, parametrised by
``FXD_TEST_SQS_STORES``: ``dynamodb`` by default, the deployment issue 11 asks for (DynamoDB +
SQS): a table of each test's own, with an S3 bucket of its own that takes every record past
256 bytes (so tool outputs and messages go through the offload too). The table lives on the
run's *serial* moto server (one request at a time), because these tests run several worker
processes on one table and moto does not isolate concurrent ``TransactWriteItems`` (see
tests/conftest.py); the queue stays on the threaded one. ``sqlite`` and ``redis`` run the same
tests on those stores (``FXD_TEST_SQS_STORES=dynamodb,sqlite``); they are left out of the
default run because each store adds about a minute and a half to the SQS suites, and the
worker, crash and race logic they exercise is the RQ suites' on both stores already.

The Postgres-queue worker tests use ``make_pg_harness`` (:class:`~postgres_queue_support.PgHarness`:
a schema of each test's own on the run's PostgreSQL).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import rq_support
    sys.path.insert(0, HERE)

from postgres_queue_support import PgHarness  # noqa: E402
from redis_support import free_port, unavailable  # noqa: E402
from rq_support import RqHarness  # noqa: E402
from sqs_support import AWS_ENV, SqsHarness  # noqa: E402

REDIS_SERVER = "redis-server"
DATABASES = 512
STORE_PARAMS = [
    p.strip()
    for p in os.environ.get("FXD_TEST_WORKER_STORES", "sqlite,redis").split(",")
    if p.strip()
]
# Records past this many bytes go to the test's bucket: small, so the story's tool outputs
# and messages are offloaded too.
DYNAMO_OFFLOAD_BYTES = 256
SQS_STORE_PARAMS = [
    p.strip() for p in os.environ.get("FXD_TEST_SQS_STORES", "dynamodb").split(",") if p.strip()
]


def _ping(port: int) -> bool:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def rq_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a ``redis-server`` on 127.0.0.1 that lives as long as the test session."""
    try:
        import redis  # noqa: F401
        import rq  # noqa: F401
    except ImportError:
        unavailable("redis and rq are not installed: pip install 'fxdurable[redis]'")
    binary = shutil.which(REDIS_SERVER)
    if binary is None:
        unavailable(
            f"{REDIS_SERVER} is not installed (or not on PATH): the RQ worker tests need a "
            "real Redis; install it (e.g. apt-get install redis-server)"
        )
    assert binary is not None
    directory = tmp_path_factory.mktemp("rq-redis")
    proc: subprocess.Popen[bytes] | None = None
    for _ in range(5):  # another process may take a "free" port before redis binds it
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--databases", str(DATABASES),
                "--dir", str(directory),
                "--logfile", "redis.log",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline and not _ping(port):
            time.sleep(0.05)
        if proc.poll() is None and _ping(port):
            break
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc = None
    if proc is None:
        log = directory / "redis.log"
        tail = log.read_text()[-2000:] if log.exists() else "(no log)"
        unavailable(f"{REDIS_SERVER} would not start; its log ends:\n{tail}")
    assert proc is not None
    try:
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_databases = itertools.cycle(range(1, DATABASES))


def _flush(port: int, db: int) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, db=db)
    try:
        client.flushdb()
    finally:
        client.close()


@pytest.fixture
def rq_db(rq_redis: int) -> Iterator[int]:
    """A Redis database of this test's own, empty at the start and flushed afterwards."""
    db = next(_databases)
    _flush(rq_redis, db)
    yield db
    _flush(rq_redis, db)


@pytest.fixture
def rq_test_queue(rq_redis: int, rq_db: int) -> Iterator[Any]:
    """An RQ queue on this test's own database, for tests that drive ``FxdWorker`` in
    process (the signal handlers its ``work`` installs are put back by the autouse fixture
    in tests/conftest.py)."""
    import redis
    import rq

    connection = redis.Redis(host="127.0.0.1", port=rq_redis, db=rq_db)
    try:
        yield rq.Queue("in-process", connection=connection)
    finally:
        connection.close()


@pytest.fixture(params=STORE_PARAMS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path, rq_redis: int) -> str:
    """A fresh, empty store of each backend the worker tests run on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/store.db"
    if request.param == "redis":
        db = next(_databases)
        _flush(rq_redis, db)
        return f"redis://127.0.0.1:{rq_redis}/{db}?prefix=t{uuid.uuid4().hex[:10]}"
    raise NotImplementedError(request.param)  # pragma: no cover


@pytest.fixture
def make_harness(
    tmp_path: Path, store_url: str, rq_redis: int, rq_db: int
) -> Iterator[Callable[..., RqHarness]]:
    """``make_harness(job_timeout=..., lease_ttl_s=...)``: a harness on this test's store and
    Redis database. Every worker it started is killed (horses included) at teardown."""
    made: list[RqHarness] = []

    def make(**kwargs: Any) -> RqHarness:
        harness = RqHarness(
            tmp_path / f"h{len(made)}",
            store_url=store_url,
            redis_port=rq_redis,
            redis_db=rq_db,
            **kwargs,
        )
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.cleanup()


@pytest.fixture
def rq_harness(make_harness: Callable[..., RqHarness]) -> RqHarness:
    """A harness with the defaults: job timeout 60 s, lease TTL 3 s, heartbeat 0.5 s, scan
    every 0.5 s."""
    return make_harness()


@pytest.fixture(params=SQS_STORE_PARAMS)
def sqs_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store of each backend the SQS worker tests run on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/store.db"
    if request.param == "redis":
        port = request.getfixturevalue("rq_redis")
        db = next(_databases)
        _flush(port, db)
        return f"redis://127.0.0.1:{port}/{db}?prefix=t{uuid.uuid4().hex[:10]}"
    if request.param == "dynamodb":
        # A table and a bucket of their own, made here: the workers and the submitter all
        # open it with ``create`` on, and none of them should race the others to make it.
        from dynamo_support import made_dynamo_url

        endpoint_url = request.getfixturevalue("serial_moto_server")
        return made_dynamo_url(endpoint_url, offload_threshold=DYNAMO_OFFLOAD_BYTES)
    raise NotImplementedError(request.param)  # pragma: no cover


@pytest.fixture
def make_sqs_harness(
    tmp_path: Path, sqs_store_url: str, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., SqsHarness]]:
    """``make_sqs_harness(fifo=..., max_receives=..., visibility_s=..., ...)``: a harness with
    a queue of its own on the moto server. The test process gets moto's dummy credentials
    (for its submitting Runtime) for the length of the test; every worker started is killed
    at teardown."""
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    made: list[SqsHarness] = []

    def make(**kwargs: Any) -> SqsHarness:
        harness = SqsHarness(
            tmp_path / f"h{len(made)}",
            store_url=sqs_store_url,
            endpoint_url=moto_server,
            **kwargs,
        )
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.cleanup()


@pytest.fixture
def make_pg_harness(tmp_path: Path, postgres_url: str) -> Iterator[Callable[..., PgHarness]]:
    """``make_pg_harness(pg_url=..., store_url=..., visibility_s=..., ...)``: a harness on the
    test's Postgres queue schema (a SQLite store file by default); every worker it started is
    killed at teardown."""
    made: list[PgHarness] = []

    def make(pg_url: str = postgres_url, store_url: str | None = None, **kwargs: Any) -> PgHarness:
        root = tmp_path / f"h{len(made)}"
        root.mkdir()
        store_url = store_url or f"sqlite:///{root}/fxd.db"
        h = PgHarness(root, store_url=store_url, pg_url=pg_url, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.cleanup()
