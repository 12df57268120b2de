"""The Postgres-queue worker harness: real ``fxdurable worker --queue postgresql://``
processes on the test run's PostgreSQL (a schema of each test's own).

Its workers hide a claimed wake for ``visibility_s`` (2 s), so a killed worker's wake is
delivered again within seconds; their safety poll (``FXD_PG_WAIT_S``) is 20 s, so every
prompt wake in these tests is a NOTIFY's, not a poll's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from worker_support import WorkerHarness

from fxdurable.queues._pg_queue_schema import parse_pg_queue_url

__all__ = ["PgHarness"]


class PgHarness(WorkerHarness):
    ready_mark = "listening on Postgres queue"
    forks_horses = False

    def __init__(
        self,
        root: Path,
        *,
        store_url: str,
        pg_url: str,
        visibility_s: int = 2,
        wait_s: int = 20,
        **timings: float,
    ) -> None:
        super().__init__(root, store_url=store_url, **timings)
        self.pg_url = pg_url
        self.visibility_s = visibility_s
        self.wait_s = wait_s

    @property
    def queue_url(self) -> str:
        return self.pg_url

    def queue_env(self) -> dict[str, str]:
        return {
            "FXD_PG_WAIT_S": str(self.wait_s),
            "FXD_PG_VISIBILITY_S": str(self.visibility_s),
            "FXD_PG_JOB_TIMEOUT_S": "60",
        }

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``query`` ({s} is the queue's schema) on a connection of its own."""
        settings = parse_pg_queue_url(self.pg_url)
        with psycopg.connect(settings.conninfo, autocommit=True) as conn:
            cur = conn.execute(query.format(s=f'"{settings.schema}"'), params or None)
            return list(cur.fetchall()) if cur.description else []

    def depth(self) -> int:
        """Wakes on the queue, pending or claimed (dead ones left out)."""
        return int(self.sql("SELECT count(*) FROM {s}.fxd_wakes WHERE NOT dead")[0][0])
