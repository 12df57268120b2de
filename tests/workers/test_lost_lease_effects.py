"""A store away for longer than the lease while an unsafe tool runs: at most one effect (issue
22 §1, DESIGN §3.9 and §9 "a cancelled thread still runs", docs/leases.md).

On every pair (an embedded Runtime on SQLite, RQ workers on the Redis store, SQS workers on
DynamoDB) two worker processes serve one session. The first starts the unsafe deploy (a sync
tool whose thread ignores cancellation, or an async one that swallows its cancellation) and
the store goes away for 1x, 2x or 5x the lease TTL as it starts: SQLite locked by the test
process's open ``BEGIN EXCLUSIVE``, Redis and DynamoDB behind a TCP proxy that black-holes
every byte (:class:`fxdurable.testing.faults.FaultProxy`). The deploy takes its effect only at
the end, well after the outage, and the other worker recovers the turn once the store is back:
the deploy is ``outcome_unknown``, the model checks, finds no effect and deploys again,
deliberately.

Before: the first worker's heartbeat cancelled its run, but the deploy's thread (or the deaf
coroutine) went on and took its effect after the check: two effects of one operation. Now the
process that still executes it at its stop deadline exits (status 75) before its lease expires,
so what the second worker checks is final: exactly one effect, the deliberate one.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq_support import RqHarness, pid_alive, wait_until
from sqs_support import AWS_ENV, SqsHarness
from worker_support import REPO, WorkerHarness, WorkerProc

from fxdurable.runtime.leases import LOST_LEASE_EXIT_STATUS
from fxdurable.testing.faults import FaultProxy as TcpProxy
from tests.kit import lease_world

pytestmark = pytest.mark.slow

LEASE_TTL_S = 2.0
HEARTBEAT_S = 0.5
SESSION = "s"
EXIT_LINE = f"exiting this process (status {LOST_LEASE_EXIT_STATUS})"
LEASE_WORLD = Path(lease_world.__file__)


class EmbeddedHarness(WorkerHarness):
    """Embedded Runtimes (``python -m tests.kit.lease_world``) on one SQLite file."""

    ready_mark = lease_world.READY
    forks_horses = False

    @property
    def queue_url(self) -> str:
        return "local"

    def start_embedded(self, submit: tuple[str, str, str] | None = None) -> WorkerProc:
        n = len(self.workers) + 1
        out, err = self.logs / f"embedded-{n}.out", self.logs / f"embedded-{n}.err"
        argv = [sys.executable, "-m", "tests.kit.lease_world", "--store", self.store_url]
        if submit:
            argv += ["--submit", *submit]
        with out.open("ab") as out_f, err.open("ab") as err_f:
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=err_f,
                start_new_session=True,
            )
        worker = WorkerProc(f"embedded-{n}", proc, out, err, ready_mark=self.ready_mark)
        worker.forks_horses = False
        self.workers.append(worker)
        worker.wait_ready()
        return worker


class Pair:
    """A store/queue pair with two workers and a way to make its store away."""

    harness: WorkerHarness

    def start(self, prompt: str, request_id: str) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        raise NotImplementedError
        yield


class EmbeddedSqlite(Pair):
    def __init__(self, root: Path) -> None:
        path = root / "store.db"
        url = f"sqlite:///{path}?busy_timeout_ms=50"
        self.path = path
        self.harness = EmbeddedHarness(
            root / "h",
            store_url=url,
            lease_ttl_s=LEASE_TTL_S,
            heartbeat_s=HEARTBEAT_S,
            scan_interval_s=0.2,
        )

    def start(self, prompt: str, request_id: str) -> None:
        assert isinstance(self.harness, EmbeddedHarness)
        self.harness.start_embedded((SESSION, prompt, request_id))
        self.harness.start_embedded()

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        other = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        try:
            other.execute("BEGIN EXCLUSIVE")
            yield
            other.execute("ROLLBACK")
        finally:
            other.close()


class ProxiedPair(Pair):
    proxy: TcpProxy

    def start(self, prompt: str, request_id: str) -> None:
        self.harness.start_workers(2)
        self.harness.submit_one(SESSION, prompt, request_id)

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        with self.proxy.paused():
            yield


class RedisRq(ProxiedPair):
    def __init__(self, root: Path, redis_port: int, redis_db: int) -> None:
        self.proxy = TcpProxy("127.0.0.1", redis_port)
        store_db = (redis_db + 256) % 512  # another database of the same server
        store = (
            f"redis://127.0.0.1:{self.proxy.port}/{store_db}"
            f"?prefix=t{uuid.uuid4().hex[:10]}&socket_timeout=0.5"
        )
        self.harness = RqHarness(
            root / "h",
            store_url=store,
            redis_port=redis_port,  # RQ itself talks to Redis directly: the store is away
            redis_db=redis_db,
            lease_ttl_s=LEASE_TTL_S,
            heartbeat_s=HEARTBEAT_S,
            scan_interval_s=0.5,
        )


class DynamoSqs(ProxiedPair):
    def __init__(self, root: Path, table_endpoint: str, sqs_endpoint: str) -> None:
        from dynamo_support import dynamo_url

        from fxdurable.stores.dynamodb import DynamoStore

        host, port = table_endpoint.removeprefix("http://").split(":")
        self.proxy = TcpProxy(host, int(port))
        store = dynamo_url(f"http://127.0.0.1:{self.proxy.port}")
        DynamoStore(store, create=True).close()
        self.harness = SqsHarness(
            root / "h",
            store_url=store,
            endpoint_url=sqs_endpoint,  # SQS stays reachable: the store is away
            lease_ttl_s=LEASE_TTL_S,
            heartbeat_s=HEARTBEAT_S,
            scan_interval_s=0.5,
        )


@pytest.fixture(
    params=[
        "embedded-sqlite",
        pytest.param("rq-redis", marks=pytest.mark.redis),
        pytest.param("sqs-dynamodb", marks=pytest.mark.aws),
    ]
)
def pair(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Pair]:
    made: Pair
    if request.param == "embedded-sqlite":
        made = EmbeddedSqlite(tmp_path)
    elif request.param == "rq-redis":
        made = RedisRq(
            tmp_path, request.getfixturevalue("rq_redis"), request.getfixturevalue("rq_db")
        )
    else:
        for key, value in AWS_ENV.items():
            monkeypatch.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(key, raising=False)
        made = DynamoSqs(
            tmp_path,
            request.getfixturevalue("serial_moto_server"),
            request.getfixturevalue("moto_server"),
        )
    try:
        yield made
    finally:
        made.harness.cleanup()
        if isinstance(made, ProxiedPair):
            made.proxy.close()


# Every pair meets every outage length and both kinds of deaf deploy, and both kinds the
# longest outage, in four runs rather than the six of the whole product (the file was the
# suite's longest: each run waits out its outage and then the deploy, 6-14 s, by design). The
# stale process's side is the same at every length (it exits at its stop deadline, before
# its lease expires, whatever the outage's length); what the length changes is when the other
# worker can take the turn over: at 1x as the lease expires, at 2x and 5x after it did.
OUTAGES = [("sync", 1), ("async", 2), ("sync", 5), ("async", 5)]


@pytest.mark.parametrize(("kind", "ttls"), OUTAGES, ids=[f"{t}-{k}" for k, t in OUTAGES])
def test_a_store_away_longer_than_the_lease_leaves_one_effect(
    pair: Pair, kind: str, ttls: int
) -> None:
    outage_s = ttls * LEASE_TTL_S
    h = pair.harness
    # The deploy's effect comes well after the outage and the other worker's recovery.
    env = {"FXD_TEST_WORLD": str(h.world_dir), "FXD_TEST_DEPLOY_S": str(outage_s + 4.0)}
    h.use_agents(LEASE_WORLD, lambda: lease_world.agents(h.world_dir, outage_s + 4.0), env=env)
    op = f"op-{kind}-{ttls}"
    pair.start(f"deploy {op} {kind}", f"r-{op}")
    world = h.world_dir

    (execution_id, stale_pid) = wait_until(
        lambda: next(iter(lease_world.calls(world, "start", op)), None), 30, "the deploy to start"
    )
    with pair.away():
        time.sleep(outage_s)  # the fault itself lasts this long; nothing waits on it

    found = h.read(lambda v: v.get_submission_by_request(f"r-{op}"))
    assert found is not None
    (sub,) = h.wait_settled([found.id], timeout=90)
    # The stale execution ends one way or the other: its process exits, or (before) it ran on.
    wait_until(
        lambda: (
            not pid_alive(stale_pid)
            or (execution_id, stale_pid) in lease_world.calls(world, "end", op)
        ),
        60,
        "the stale deploy to end",
    )
    effects = lease_world.effects(world, op)
    assert len(effects) == 1, (effects, h.diagnostics())
    assert effects[0][2] != stale_pid, "the stale worker's deploy took effect"
    # At least the stale worker's attempt was interrupted (on DynamoDB a 5x outage has once
    # also cut the taker's first attempt short: its store calls were still timing out).
    assert sub.status == "completed" and sub.interruptions >= 1, (sub, h.diagnostics())
    logs = "\n".join(w.log() for w in h.workers)
    assert EXIT_LINE in logs and f"session {SESSION}" in logs, logs[-4000:]

    exits = h.stop_workers(signal.SIGTERM, timeout=30)
    assert exits, "the workers were still running"
    settled = [e for e in h.events(SESSION) if e.type.startswith("submission.completed")]
    assert len(settled) == 1
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0, (out, err)
