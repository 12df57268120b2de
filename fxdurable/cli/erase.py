"""``fxdurable erase SESSION [--force]``: delete a session and what only it names
(docs/erasure.md). Run again after an interrupted erase: it resumes."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "erase",
        help="delete a session: its journal, events, state, the blobs no other session "
        "names, its subagents' sessions and its forks' references to it",
    )
    cmd.add_argument("session", help="session id")
    where = cmd.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="path of a SQLite store file")
    where.add_argument("--store", help="store URL, e.g. redis://127.0.0.1:6379/0")
    cmd.add_argument(
        "--force",
        action="store_true",
        help="erase even while a turn is queued or running: its abort is recorded first",
    )


def run(args: argparse.Namespace) -> int:
    from fxdurable.backends import open_store
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal
    from fxdurable.errors import ConfigurationError
    from fxdurable.runtime.erase import erase_session

    if args.db is not None and not Path(args.db).is_file():
        raise ConfigurationError(f"no fxdurable store at {args.db}: the file does not exist")
    url = f"sqlite:///{Path(args.db).resolve()}" if args.db is not None else args.store
    store = open_store(url)
    try:
        report = erase_session(
            Journal(store, SystemClock(), RandomIds()), args.session, force=args.force
        )
    finally:
        store.close()
    print(
        f"erased session {report.session_id}: {report.records} records, "
        f"{len(report.children)} subagent sessions, {len(report.forks)} forks unlinked, "
        f"{len(report.blobs_deleted)} blobs deleted ({len(report.blobs_kept)} kept: named by "
        f"another session)" + (", an interrupted erase completed" if report.resumed else "")
    )
    return 0
