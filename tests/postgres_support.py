"""A PostgreSQL server of the test run's own: ``initdb`` into a temporary directory, the
``postgres`` binary on a free 127.0.0.1 port with ``fsync=on``, torn down after. No Docker.

The binaries are Debian's ``postgresql`` package (``/usr/lib/postgresql/<major>/bin``; the
Makefile installs it as root, like chromium) or whatever ``FXD_TEST_PG_BIN`` names. PostgreSQL
refuses to run as root, so as root the server runs as the ``postgres`` user the package
creates, in a directory under ``/tmp`` that user owns (pytest's own temporary directories are
root's, mode 0700).

The postmaster is started in a process group of its own, in the foreground (no ``pg_ctl``
daemon), so that :meth:`PostgresServer.kill` is a real crash of the whole server (postmaster
and backends, SIGKILL) and :meth:`PostgresServer.start` afterwards is crash recovery from the
WAL on the same port and directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fxdurable.testing.net import free_port

__all__ = ["PostgresServer", "pg_bin_dir", "pg_ready", "schema_connection", "schema_raw"]

# The user PostgreSQL runs as when the tests run as root (Debian's package creates it).
PG_USER = "postgres"


def pg_bin_dir() -> Path | None:
    """Where ``initdb`` and ``postgres`` are: ``FXD_TEST_PG_BIN``, else the newest Debian
    ``/usr/lib/postgresql/<major>/bin``, else ``initdb`` on PATH; None when there is none."""
    given = os.environ.get("FXD_TEST_PG_BIN")
    if given:
        return Path(given)
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        majors = sorted(
            (p for p in root.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if majors:
            return majors[-1] / "bin"
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _as_server_user() -> tuple[Callable[[], None] | None, int | None, int | None]:
    """(preexec_fn, uid, gid) that run a child as ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None, None, None
    entry = pwd.getpwnam(PG_USER)
    uid, gid = entry.pw_uid, entry.pw_gid

    def drop() -> None:
        os.setgid(gid)
        os.setuid(uid)

    return drop, uid, gid


def pg_ready(url: str, timeout: float) -> str | None:
    """None once a connection to ``url`` runs ``SELECT 1``; else the last error at the
    deadline."""
    import psycopg

    deadline = time.monotonic() + timeout
    error = "never tried"
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return None
        except psycopg.Error as exc:  # the server starting up, recovering, or not listening
            error = str(exc).strip()
        if time.monotonic() > deadline:
            return error
        time.sleep(0.05)


def schema_connection(url: str) -> Any:
    """An autocommit connection to ``url``'s server with ``url``'s schema (``?schema=``) on
    its search path: a test's admin's, outside the store."""
    import psycopg

    from fxdurable.stores._pg_connect import parse_pg_url

    settings = parse_pg_url(url)
    conn = psycopg.connect(settings.conninfo, autocommit=True)
    conn.execute(f'SET search_path TO "{settings.schema}"')
    return conn


def schema_raw(url: str) -> bytes:
    """Every live row of every table in ``url``'s schema (``?schema=``), every column, one
    line per row: what a raw search of the store sees (tests/stores/test_erase_raw.py).

    Each value is fetched as the driver decodes it, not as ``row::text``: a ``bytea``'s text
    form is hex (``\\x4649...``), in which a search for a blob's text would find nothing
    even when the blob is there. Only live rows: a deleted row's dead tuple stays in the
    table's pages until VACUUM, and no query sees it (docs/erasure.md)."""
    import psycopg
    from psycopg import sql

    from fxdurable.stores._pg_connect import parse_pg_url

    settings = parse_pg_url(url)
    lines: list[bytes] = []
    with psycopg.connect(settings.conninfo) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
            (settings.schema,),
        ).fetchall()
        assert tables, f"schema {settings.schema!r} has no tables"
        for (table,) in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(settings.schema), sql.Identifier(table)
            )
            for row in conn.execute(query):
                values = [v if isinstance(v, bytes) else str(v).encode() for v in row]
                lines.append(table.encode() + b": " + b" | ".join(values).replace(b"\n", b" "))
    return b"\n".join(lines)


class PostgresServer:
    """One server; :meth:`start`, :meth:`stop` (clean), :meth:`kill` (SIGKILL of the whole
    server), :meth:`restart`. ``url`` names the ``postgres`` database as the ``postgres``
    superuser over TCP (trust authentication on 127.0.0.1 only)."""

    def __init__(self, *, bin_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.bin_dir = bin_dir
        self.settings = settings or {}
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="fxd-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._initialised = False

    @property
    def url(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/postgres"

    def _initdb(self) -> None:
        preexec, uid, gid = _as_server_user()
        self.sockets.mkdir()
        if uid is not None and gid is not None:
            for path in (self.root, self.sockets):
                os.chown(path, uid, gid)
        result = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D", str(self.data),
                "-U", PG_USER,
                "--auth=trust",
                "-E", "UTF8",
                "--locale=C",
                "--no-sync",  # initdb's own flush only; the server below runs with fsync=on
            ],
            preexec_fn=preexec,
            capture_output=True,
            text=True,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n{result.stderr[-2000:]}")
        self._initialised = True

    def start(self, timeout: float = 30.0) -> None:
        if not self._initialised:
            self._initdb()
        preexec, _, _ = _as_server_user()
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockets),
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "200",
            "shared_buffers": "32MB",
            **self.settings,
        }
        options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        for _ in range(5):  # another process may take a "free" port before we bind it
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [*command[:-1], str(self.port), *options],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=preexec,
                    start_new_session=True,  # kill() takes the backends too
                )  # fmt: skip
            error = pg_ready(self.url, timeout)
            if error is None:
                return
            if self.proc.poll() is None:
                self.kill()
                raise RuntimeError(f"postgres on port {self.port} never answered: {error}")
            self.proc = None
            if "could not bind" not in self._log_tail():
                break
            self.port = free_port()
        raise RuntimeError(f"postgres would not start; its log ends:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"

    def _signal_group(self, sig: int, timeout: float) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # Backends notice their postmaster's death on their own; wait until none is left in
        # the group, or the next start finds their shared memory still attached.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        self.proc = None

    def stop(self) -> None:
        """A fast clean shutdown (SIGINT: running transactions rolled back, a checkpoint)."""
        self._signal_group(signal.SIGINT, timeout=20)

    def kill(self) -> None:
        """A crash: SIGKILL to the postmaster and every backend; the WAL is what remains."""
        self._signal_group(signal.SIGKILL, timeout=10)

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or kill) and start again on the same port and data directory."""
        port = self.port
        self.kill() if crash else self.stop()
        self.start()
        assert self.port == port, "the restarted server moved to another port"

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
