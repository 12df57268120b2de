"""DBOS Transact: a workflow of N sequential no-op ``@DBOS.step`` steps, SQLite system database,
and PostgreSQL (its first-class system database) on the bench's server.

Modes: DBOS's own SQLite defaults (it sets no journal mode, so SQLite's rollback journal with
``synchronous=FULL``), then WAL with ``synchronous=FULL`` and ``NORMAL``. For the WAL modes the
bench passes DBOS a ``system_database_engine`` (its documented hook for a custom engine) built
the way DBOS builds its own SQLite engine (``IMMEDIATE`` transactions, the same busy timeout
and foreign keys), plus the two pragmas. DBOS checkpoints each step's output in one
transaction, and the workflow's status at its start and end. On PostgreSQL (mode
``Postgres``) the system database is a fresh database of the bench's server
(``FXD_BENCH_POSTGRES_URL``); the mode measures nothing without one.

The batch workload (issue 23's parallel row): an async workflow that starts N no-op async
``@DBOS.step`` steps as tasks in a fixed order and awaits them with ``asyncio.gather`` (what
DBOS documents for running steps in parallel: steps get their ids in start order, before their
first ``await``, so recovery replays them deterministically); WAL+FULL only. One event loop
(an ``asyncio.Runner``) runs every workflow of the mode.

Run by :mod:`bench.peers` as ``python -m bench.peer_dbos``; needs ``make bench-venv``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.peers import BATCH, POSTGRES, STEPS, peer_main, postgres_url, seconds_per_step

MODES = ("default (rollback journal, FULL)", "WAL+FULL", "WAL+NORMAL", POSTGRES)
BATCH_MODES = ("WAL+FULL",)


def _engine(url: str, synchronous: str) -> Any:
    import sqlalchemy as sa
    from sqlalchemy import event

    engine = sa.create_engine(url)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = "IMMEDIATE"  # as dbos/_sys_db_sqlite.py does
        dbapi_conn.execute("PRAGMA busy_timeout=30000")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute(f"PRAGMA synchronous={synchronous}")

    return engine


@contextmanager
def _launched(directory: Path, mode: str) -> Iterator[bool]:
    """DBOS launched on the mode's system database (its workflows and steps registered
    before entering); yields False, launching nothing, for Postgres without a server."""
    from dbos import DBOS, DBOSConfig

    url = f"sqlite:///{(directory / 'dbos.sqlite').resolve()}"
    if mode == POSTGRES:
        server = postgres_url("dbos")
        if server is None:
            yield False
            return
        url = server
    config: DBOSConfig = {"name": "fxd-bench", "system_database_url": url, "log_level": "ERROR"}
    engine = None
    if mode.startswith("WAL+"):
        engine = _engine(url, mode.removeprefix("WAL+"))
        config["system_database_engine"] = engine
    DBOS(config=config)
    DBOS.launch()
    try:
        yield True
    finally:
        DBOS.destroy(destroy_registry=True)
        if engine is not None:
            engine.dispose()


def measure(directory: Path, mode: str, ns: Sequence[int], steps: int) -> dict[str, float]:
    from dbos import DBOS

    @DBOS.step()
    def noop_step(i: int) -> int:
        return i

    @DBOS.workflow()
    def steps_workflow(n: int) -> int:
        for i in range(n):
            noop_step(i)
        return n

    with _launched(directory, mode) as launched:
        return _per_step(steps_workflow, ns, steps) if launched else {}


def measure_batch(directory: Path, mode: str, ns: Sequence[int], calls: int) -> dict[str, float]:
    from dbos import DBOS

    @DBOS.step()
    async def noop_step(i: int) -> int:
        return i

    @DBOS.workflow()
    async def batch_workflow(n: int) -> int:
        tasks = [asyncio.create_task(noop_step(i)) for i in range(n)]
        return len(await asyncio.gather(*tasks))

    with _launched(directory, mode) as launched, asyncio.Runner() as runner:
        if not launched:
            return {}
        return _per_step(lambda n: runner.run(batch_workflow(n)), ns, calls)


def _per_step(unit: Callable[[int], object], ns: Sequence[int], steps: int) -> dict[str, float]:
    return {str(n): seconds_per_step(unit, n, steps) for n in ns}


def _import() -> object:
    import dbos

    return dbos


if __name__ == "__main__":
    workloads = {STEPS: (MODES, measure), BATCH: (BATCH_MODES, measure_batch)}
    sys.exit(peer_main("dbos", _import, workloads))
