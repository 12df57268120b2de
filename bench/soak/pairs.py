"""The store/queue pairs the soak runs on, each with its servers, its URLs and its faults.

A :class:`Pair` starts what it needs in ``root`` (a redis-server, moto servers, fault proxies),
names the store URL its workers use (through a proxy where the store has a server) and the
direct one the soak reads and submits through (never faulted: the soak plays the users and the
auditor, who see the store as it is), and lists its faults:

- ``sqlite-rq``: SQLite store, RQ on Redis as the queue only. Store outage: the soak holds
  SQLite's write lock (``BEGIN EXCLUSIVE``), so every writer's commit, lease renewals
  included, waits and fails as on a stalled disk. Pause: redis-server SIGSTOPped.
- ``redis-rq``: Redis store and RQ queue, both through a proxy. Outages: the proxy stalls,
  black-holes or refuses. Pause: redis-server SIGSTOPped.
- ``dynamodb-sqs``: DynamoDB (with S3 offload) on the serial moto server, behind a proxy, and
  SQS on a threaded moto server (a long poll would hold the serial one). Outages: the proxy;
  its stall is the pause.
- ``sqlite-embedded``: ``fx.Runtime`` with the in-process queue, one process
  (:mod:`bench.soak.embedded`). Outage: the write lock, as for ``sqlite-rq``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.soak.procs import Proc
from fxdurable.testing.faults import FaultProxy, Mode

__all__ = ["PAIRS", "Fault", "Pair", "open_pair"]

PAIRS = ("sqlite-rq", "redis-rq", "dynamodb-sqs", "sqlite-embedded")
REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@dataclass
class Fault:
    """A store or queue fault the soak can start and end: ``kind`` is what the summary counts
    (``stall``, ``blackhole``, ``down``, ``sigstop``, ``lock``)."""

    kind: str
    begin: Callable[[], None]
    end: Callable[[], None]


def _proxy_fault(proxy: FaultProxy, mode: Mode) -> Fault:
    return Fault(mode, lambda: proxy.set_mode(mode), lambda: proxy.set_mode("open"))


def _sigstop_fault(pid: Callable[[], int]) -> Fault:
    return Fault(
        "sigstop",
        lambda: os.kill(pid(), signal.SIGSTOP),
        lambda: os.kill(pid(), signal.SIGCONT),
    )


class _SqliteLock:
    """Holds the write lock of a SQLite database between :meth:`begin` and :meth:`end`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    def begin(self) -> None:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN EXCLUSIVE")
        with self._guard:
            self._conn = conn

    def end(self) -> None:
        with self._guard:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.execute("ROLLBACK")
            conn.close()


class Pair:
    """One pair's world. Use as a context manager: servers start on enter, stop on exit."""

    name = ""
    forks_horses = False
    embedded = False

    def __init__(self, root: Path, *, lease_ttl_s: float, heartbeat_s: float) -> None:
        self.root = root
        self.world = root / "world"
        self.logs = root / "logs"
        for path in (self.world, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s
        self.plan_file = root / "plan.jsonl"  # the embedded runtime's submissions
        self._stack = contextlib.ExitStack()
        self.store_url = ""  # what workers use (faulted)
        self.direct_store_url = ""  # what the soak reads and submits through
        self.queue_url = "local"
        self.outages: list[Fault] = []
        self.pauses: list[Fault] = []

    def __enter__(self) -> Pair:
        try:
            self.start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()

    def start(self) -> None:
        raise NotImplementedError

    def extra_env(self) -> dict[str, str]:
        return {}

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "SOAK_"))}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env |= {
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
            "FXD_STORE": self.store_url,
            "FXD_QUEUE": self.queue_url,
            "FXD_AGENTS": "bench.soak.agent:agents",
            "FXD_LEASE_TTL_S": str(self.lease_ttl_s),
            "FXD_HEARTBEAT_S": str(self.heartbeat_s),
            "FXD_SCAN_INTERVAL_S": str(self.scan_interval_s),
            # Sessions nobody holds are woken again after 2 s without activity, not 30 s.
            "FXD_SCAN_QUIET_S": "2",
            "SOAK_WORLD": str(self.world),
        }
        return env | self.extra_env()

    scan_interval_s = 0.5

    def worker(self, index: int) -> Proc:
        argv = [sys.executable, "-m", "fxdurable", "-v", "worker"]
        argv += ["--scan-interval", str(self.scan_interval_s)]
        return Proc(
            name=f"{self.name}-w{index}",
            argv=argv,
            env=self.env(),
            cwd=self.root,
            log=self.logs / f"worker-{index}.log",
            forks_horses=self.forks_horses,
        )

    def _redis(self) -> object:
        from bench.redis_server import RedisServer

        return self._stack.enter_context(RedisServer(self.root / "redis", appendonly=True))

    def _proxy(self, port: int) -> FaultProxy:
        return self._stack.enter_context(FaultProxy("127.0.0.1", port))


class SqliteRq(Pair):
    name = "sqlite-rq"
    forks_horses = True

    def start(self) -> None:
        from bench.redis_server import RedisServer

        redis = self._redis()
        assert isinstance(redis, RedisServer)
        db = self.root / "store.db"
        self.store_url = self.direct_store_url = f"sqlite:///{db}"
        self.queue_url = f"rq://127.0.0.1:{redis.port}/0?queue=soak&job_timeout=120"
        lock = _SqliteLock(db)
        self.outages = [Fault("lock", lock.begin, lock.end)]
        self.pauses = [_sigstop_fault(lambda: redis.pid)]


class RedisRq(Pair):
    name = "redis-rq"
    forks_horses = True

    def start(self) -> None:
        from bench.redis_server import RedisServer

        redis = self._redis()
        assert isinstance(redis, RedisServer)
        proxy = self._proxy(redis.port)
        self.store_url = f"redis://127.0.0.1:{proxy.port}/0?prefix=soak"
        self.direct_store_url = f"redis://127.0.0.1:{redis.port}/0?prefix=soak"
        self.queue_url = f"rq://127.0.0.1:{proxy.port}/1?queue=soak&job_timeout=120"
        self.outages = [_proxy_fault(proxy, m) for m in ("stall", "blackhole", "down")]
        self.pauses = [_sigstop_fault(lambda: redis.pid)]


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment until the block ends, then as they were."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class DynamoSqs(Pair):
    name = "dynamodb-sqs"
    # The serial moto server serves one request at a time; scans every 0.5 s from two workers
    # queued every other request behind them on a loaded machine. SQS redelivers a killed
    # worker's wake after its visibility timeout (2 s) anyway; the scan is the backstop.
    scan_interval_s = 5.0

    def start(self) -> None:
        import boto3

        # The soak's own clients (the submitting Runtime, the reads, the verdict) find moto's
        # dummy credentials where boto3 looks, and no profile of this machine.
        self._stack.enter_context(_environ(self.extra_env()))

        from bench.moto_server import moto_server

        serial = self._stack.enter_context(moto_server(self.root, serial=True))
        threaded = self._stack.enter_context(moto_server(self.root))
        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        s3 = session.client("s3", endpoint_url=serial)
        bucket = f"soak-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        s3.close()
        sqs = session.client("sqs", endpoint_url=threaded)
        queue = sqs.create_queue(QueueName=f"soak-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        sqs.close()
        proxy = self._proxy(int(serial.rsplit(":", 1)[1]))
        table = f"soak-{uuid.uuid4().hex[:12]}"
        # Records past 2 KB go to S3, so the soak's faults reach the offload too.
        query = f"region={REGION}&bucket={bucket}&offload_threshold=2000"
        self.store_url = f"dynamodb://{table}?{query}&endpoint_url=http://127.0.0.1:{proxy.port}"
        self.direct_store_url = f"dynamodb://{table}?{query}&endpoint_url={serial}"
        self.queue_url = f"sqs://{queue}?region={REGION}"
        from fxdurable.stores.dynamodb import DynamoStore

        with contextlib.closing(DynamoStore(self.direct_store_url, create=True, session=session)):
            pass
        self.outages = [_proxy_fault(proxy, m) for m in ("stall", "blackhole", "down")]
        self.pauses = [_proxy_fault(proxy, "stall")]

    def extra_env(self) -> dict[str, str]:
        return AWS_ENV | {
            "AWS_CONFIG_FILE": str(self.root / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.root / "no-aws-credentials"),
            "FXD_SQS_WAIT_S": "1",
            "FXD_SQS_VISIBILITY_S": "2",
            "FXD_SQS_JOB_TIMEOUT_S": "120",
        }


class SqliteEmbedded(Pair):
    name = "sqlite-embedded"
    embedded = True

    def start(self) -> None:
        db = self.root / "store.db"
        self.store_url = self.direct_store_url = f"sqlite:///{db}"
        lock = _SqliteLock(db)
        self.outages = [Fault("lock", lock.begin, lock.end)]

    def worker(self, index: int) -> Proc:
        argv = [sys.executable, "-m", "bench.soak.embedded", "--plan", str(self.plan_file)]
        return Proc(
            name=f"{self.name}-p{index}",
            argv=argv,
            env=self.env(),
            cwd=self.root,
            log=self.logs / f"embedded-{index}.log",
            forks_horses=False,
        )


_CLASSES: dict[str, type[Pair]] = {
    c.name: c for c in (SqliteRq, RedisRq, DynamoSqs, SqliteEmbedded)
}


@contextlib.contextmanager
def open_pair(name: str, root: Path, *, lease_ttl_s: float, heartbeat_s: float) -> Iterator[Pair]:
    with _CLASSES[name](root, lease_ttl_s=lease_ttl_s, heartbeat_s=heartbeat_s) as pair:
        yield pair
