"""Shared fixtures; see tests/crash for the crash suite.

Redis: ``redis_server`` starts one ``redis-server`` for the whole run on a free port (AOF on,
no RDB snapshots, data in a temporary directory), or uses ``FXD_TEST_REDIS_URL`` when set
(a server with AOF on, or a URL ending ``?durability=none``: the store refuses a Redis without
persistence).
``redis_url`` gives each test its own key prefix on it, deleted afterwards, so tests never
see each other's keys (and a shared server named by ``FXD_TEST_REDIS_URL`` is never
flushed). ``redis_factory`` starts dedicated servers a test may kill and restart.

Without ``redis-server`` the Redis tests are skipped, except in CI (``CI=true``), where a
Redis that cannot be run or reached fails them.

AWS: ``moto_server`` starts one moto server for the whole run on a free port and yields its
endpoint URL (or yields ``FXD_TEST_AWS_ENDPOINT``, e.g. LocalStack's, without starting one);
clients take dummy credentials from ``aws_support.aws_session()``. Without moto
the AWS tests are skipped, except in CI, where they fail. ``serial_moto_server`` is a second
one that serves one request at a time, for DynamoDB tables with concurrent writers (the store
tests' racing writers, the SQS worker suites' several worker processes, and any turn run by
the runtime: its heartbeat renews the lease while the turn commits): moto applies a
``TransactWriteItems`` item by item without a lock, so on its threaded server two concurrent
transactions are not isolated as DynamoDB's are (bench/moto_server.py), and a cancelled one
can wipe another's commit (tests/stores/test_moto_transaction_isolation.py). Keep SQS on
``moto_server``: a long poll would hold the serial one for everybody. With
``FXD_TEST_AWS_ENDPOINT`` both are that endpoint (LocalStack isolates transactions).

PostgreSQL: ``postgres_server`` initdb's and starts one server per run (fsync on, a free port;
tests/postgres_support.py) or uses ``FXD_TEST_POSTGRES_URL``; ``postgres_url`` gives each test
a schema of its own (``?schema=...``), dropped afterwards; ``postgres_factory`` starts
dedicated servers a test may SIGKILL and restart. Skipped without PostgreSQL, failed in CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tiers
import wheel_support
from aws_support import moto_running
from browser_support import artifacts_dir
from postgres_support import PostgresServer, pg_bin_dir, pg_ready
from redis_support import free_port, unavailable

from fxdurable.runtime import leases
from fxdurable.testing.net import stop_process

REDIS_SERVER = "redis-server"


# -- the tiers (tests/tiers.py): system tests are marked here, --fast runs the rest ----------


def pytest_addoption(parser: pytest.Parser) -> None:
    tiers.add_option(parser)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark_system(config, items)
    tiers.longest_first(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    yield from tiers.guard(item)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tiers.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    tiers.write_durations(session)


# The wheel and its venvs are made once per run, not once per xdist worker (tests/wheel_support.py):
# the controller makes the directory they share before it starts the workers.
_run_dir: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _run_dir
    _run_dir = wheel_support.open_run_dir()
    leases.exit_process = _lost_lease_in_a_test


# A run in this process whose lease lapsed with its tool code still executing would end the
# process (on_lost_lease="exit", fxdurable/runtime/leases.py): an xdist worker gone, the run
# stopped without saying where. The test it happens in fails instead, with the guard's line;
# tests of the exit itself run the worker in a process of its own.
_lost_leases: list[str] = []


def _lost_lease_in_a_test(status: int, line: str) -> None:
    _lost_leases.append(line.strip())


def pytest_unconfigure(config: pytest.Config) -> None:
    wheel_support.close_run_dir(_run_dir)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    tiers.note_cpu(report)
    tiers.fail_if_spawned(report)
    if _lost_leases and report.when in ("call", "teardown"):
        lines = "\n".join(_lost_leases)
        _lost_leases.clear()
        report.outcome = "failed"
        report.longrepr = (
            f"{report.nodeid}: a run's lease lapsed while its tool code executed, which ends a "
            f"worker process (this one, were it not the test suite's):\n{lines}"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once where the browser tests' screenshots are (tests/console/conftest.py), when
    any ran. A run overwrites the files of the tests it runs and leaves the rest."""
    reports = (
        r for key, reports in terminalreporter.stats.items() if key != "deselected" for r in reports
    )
    if any(getattr(r, "nodeid", "").startswith("tests/console/") for r in reports):
        terminalreporter.write_line(f"browser screenshots: {artifacts_dir()}")


def _ping(url: str, timeout: float) -> str | None:
    """None once the server answers PING, else the last error."""
    import redis

    deadline = time.monotonic() + timeout
    error = "no attempt"
    while True:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        try:
            if client.ping():
                return None
        except redis.RedisError as exc:  # includes LOADING while the AOF is read back
            error = str(exc)
        finally:
            client.close()
        if time.monotonic() > deadline:
            return error
        time.sleep(0.05)


class RedisServer:
    """A redis-server subprocess on 127.0.0.1 with its data (the AOF) in ``directory``;
    ``appendonly=False`` runs one without persistence (which the Redis store refuses)."""

    def __init__(
        self, directory: Path, *, fsync: str = "everysec", appendonly: bool = True
    ) -> None:
        self.directory = directory
        self.fsync = fsync
        self.appendonly = appendonly
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # another process may take a "free" port before we bind it
            self.proc = subprocess.Popen(
                [
                    REDIS_SERVER,
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    "--appendonly", "yes" if self.appendonly else "no",
                    "--appendfsync", self.fsync,
                    "--dir", str(self.directory),
                    "--logfile", "redis.log",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            error = _ping(self.url, timeout)
            if error is None:
                return
            if self.proc.poll() is None:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} never answered: {error}")
            self.proc = None
            self.port = free_port()
        log = self.directory / "redis.log"
        tail = log.read_text()[-2000:] if log.exists() else "(no log)"
        raise RuntimeError(f"redis-server would not start; its log ends:\n{tail}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM shuts down cleanly; SIGKILL is a crash (the AOF is all that remains)."""
        if self.proc is None:
            return
        stop_process(self.proc, sig)
        self.proc = None

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop and start again on the same port and directory (so from the same AOF)."""
        self.stop(sig)
        port = self.port
        self.start()
        assert self.port == port, "the restarted server moved to another port"


def _drop_prefix(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@pytest.fixture(autouse=True)
def _signal_handlers_put_back() -> Iterator[None]:
    """Every test leaves the process's stop-signal handlers as it found them. An RQ worker
    driven in process (``work()``) and ``run_wake`` install their own for SIGINT, SIGTERM
    and SIGUSR1; left behind, RQ's turns a later test's Ctrl-C into ``StopRequested``."""
    handlers = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``redis://host:port``, no database) of a Redis for this test run."""
    try:
        import redis  # noqa: F401
    except ImportError:
        unavailable("the redis package is not installed: pip install 'fxdurable[redis]'")
    given = os.environ.get("FXD_TEST_REDIS_URL")
    if given:
        error = _ping(given, timeout=5)
        if error is not None:
            pytest.fail(f"FXD_TEST_REDIS_URL={given} cannot be reached: {error}", pytrace=False)
        yield given.rstrip("/")
        return
    if shutil.which(REDIS_SERVER) is None:
        unavailable(
            f"{REDIS_SERVER} is not installed (or not on PATH): the Redis tests need it; "
            "install it (e.g. apt-get install redis-server) or set FXD_TEST_REDIS_URL"
        )
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        server.start()
    except RuntimeError as exc:
        unavailable(str(exc))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A store URL with a key prefix of this test's own, whose keys are deleted afterwards."""
    base, _, query = redis_server.partition("?")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    # A URL that names a database keeps it; otherwise database 0.
    db_path = "" if base.rstrip("/").count("/") > 2 else "/0"
    url = f"{base}{db_path}?prefix={prefix}" + (f"&{query}" if query else "")
    yield url
    _drop_prefix(f"{base}{db_path}", prefix)


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start dedicated servers a test may kill and restart: ``redis_factory(fsync=...)``,
    ``redis_factory(appendonly=False)``."""
    if shutil.which(REDIS_SERVER) is None:
        unavailable(f"{REDIS_SERVER} is not installed: this test needs a server of its own")
    started: list[RedisServer] = []

    def start(fsync: str = "everysec", *, appendonly: bool = True) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(started)}", fsync=fsync, appendonly=appendonly)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop(signal.SIGKILL)


@contextlib.contextmanager
def _aws_endpoint(tmp_path_factory: pytest.TempPathFactory, *, serial: bool) -> Iterator[str]:
    """``FXD_TEST_AWS_ENDPOINT`` when set (LocalStack: ``make localstack-test``), else a moto
    server of this run's, serving one request at a time with ``serial``."""
    given = os.environ.get("FXD_TEST_AWS_ENDPOINT")
    if given:
        yield given.rstrip("/")
        return
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        unavailable(f"{exc.name} is not installed: pip install -e '.[test]'", "the AWS tests")
    directory = tmp_path_factory.mktemp("moto-serial" if serial else "moto")
    with moto_running(directory, serial=serial) as endpoint_url:
        yield endpoint_url


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL (``http://127.0.0.1:PORT``) of a moto server for this test run, or
    of the emulator ``FXD_TEST_AWS_ENDPOINT`` names (LocalStack: ``make localstack-test``)."""
    with _aws_endpoint(tmp_path_factory, serial=False) as endpoint_url:
        yield endpoint_url


@pytest.fixture(scope="session")
def serial_moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of a moto server serving one request at a time, for DynamoDB tables
    with concurrent writers: moto's threaded server does not isolate concurrent transactions
    as DynamoDB does. With ``FXD_TEST_AWS_ENDPOINT``, that endpoint."""
    with _aws_endpoint(tmp_path_factory, serial=True) as endpoint_url:
        yield endpoint_url


# -- PostgreSQL (tests/postgres_support.py): a server of this run's own, fsync=on ------------


def _postgres_bin() -> Path:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[test]'", "the PostgreSQL tests")
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        unavailable(
            "PostgreSQL's initdb is not installed: apt-get install postgresql (make test "
            "installs it as root), or set FXD_TEST_PG_BIN",
            "the PostgreSQL tests",
        )
    assert bin_dir is not None
    return bin_dir


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL (``postgresql://postgres@127.0.0.1:PORT/postgres``) of a PostgreSQL server
    for this test run (each xdist worker its own), or ``FXD_TEST_POSTGRES_URL`` when set."""
    given = os.environ.get("FXD_TEST_POSTGRES_URL")
    if given:
        error = pg_ready(given, timeout=5)
        if error is not None:
            pytest.fail(f"FXD_TEST_POSTGRES_URL={given} cannot be reached: {error}", pytrace=False)
        yield given
        return
    server = PostgresServer(bin_dir=_postgres_bin())
    try:
        server.start()
    except RuntimeError as exc:
        server.remove()
        unavailable(str(exc), "the PostgreSQL tests")
    try:
        yield server.url
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A URL on the run's server with a schema of this test's own (``?schema=t…``), dropped
    (with everything in it) afterwards, so tests never see each other's tables."""
    import psycopg

    schema = f"t{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in postgres_server else "?"
    yield f"{postgres_server}{separator}schema={schema}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def postgres_factory() -> Iterator[Callable[..., PostgresServer]]:
    """Start dedicated servers a test may kill (``server.kill()``: SIGKILL of postmaster and
    backends) and restart from the same data directory: ``postgres_factory(settings={...})``."""
    bin_dir = _postgres_bin()
    started: list[PostgresServer] = []

    def start(*, settings: dict[str, str] | None = None) -> PostgresServer:
        server = PostgresServer(bin_dir=bin_dir, settings=settings)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.kill()
        server.remove()
