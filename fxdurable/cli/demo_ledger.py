"""The demo's outside world: a ledger of deploys, one per store, one line per deploy.

Each line carries the execution id of the ``deploy`` call that wrote it, so a check can say
whether *this* interrupted call ran (its id is there) or not, whatever other demos on other
stores, or other sessions on this one, deployed. Where the ledger is:

* a SQLite store: next to its database file; ``deployments.log`` for the demo's own
  ``demo.db`` (``.fxd-demo/deployments.log``), ``NAME.deployments.log`` for ``NAME.db``;
* any other store (Redis, DynamoDB): in the demo directory, named after the store:
  ``deployments-redis-127.0.0.1-6379-0-1a2b3c.log`` (the suffix tells apart URLs that read
  alike, e.g. two DynamoDB endpoints with the same table name).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["LedgerEntry", "append_deploy", "ledger_path", "read_ledger"]

_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    at: str
    release: str
    execution: str


def ledger_path(workdir: Path, store_url: str | None) -> Path:
    """The ledger of the store ``store_url`` (``None``: outside a runtime, the demo dir's)."""
    if store_url is None:
        return workdir / "deployments.log"
    if store_url.startswith("sqlite:///"):
        database = Path(unquote(urlsplit(store_url).path[1:]))
        name = (
            "deployments.log" if database.name == "demo.db" else f"{database.stem}.deployments.log"
        )
        return database.parent / name
    parts = urlsplit(store_url)
    where = parts.hostname or ""
    if parts.port is not None:
        where += f"-{parts.port}"
    # No password in a file name: the URL's user info is left out of the name and the hash.
    shown = f"{parts.scheme}://{where}{parts.path}?{parts.query}"
    slug = _UNSAFE.sub("-", f"{parts.scheme}-{where}{parts.path}").strip("-")[:60]
    digest = hashlib.sha256(shown.encode()).hexdigest()[:6]
    return workdir / f"deployments-{slug}-{digest}.log"


def append_deploy(ledger: Path, *, release: str, execution_id: str) -> None:
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a") as f:
        f.write(
            f"{time.strftime('%Y-%m-%dT%H:%M:%S')} release={release} execution={execution_id}\n"
        )


def read_ledger(ledger: Path) -> list[LedgerEntry]:
    """The ledger's deploys, oldest first (none when it does not exist)."""
    entries = []
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    for line in lines:
        at, *fields = line.split()
        values = dict(field.partition("=")[::2] for field in fields)
        entries.append(
            LedgerEntry(
                at=at, release=values.get("release", "?"), execution=values.get("execution", "")
            )
        )
    return entries
