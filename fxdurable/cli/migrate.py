"""``fxdurable migrate STORE_URL``: apply the migrations a store lacks (docs/upgrading.md).

A PostgreSQL store never migrates itself on open once it holds data (a shared database's
schema changes when its operator says so): opening an outdated one raises
:class:`~fxdurable.errors.SchemaOutdatedError`, which names this command. A Redis or DynamoDB
store's layout steps are applied by a writer's open when every pending one is compatible
(older workers keep running on the result); a breaking one raises the same error and waits for
this command, run once the old workers have stopped. A SQLite file is migrated by the open
itself, so the command opens it.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("migrate", help="apply the migrations a store lacks")
    cmd.add_argument("store_url", metavar="STORE_URL", help="e.g. postgresql://u@host/db")


def run(args: argparse.Namespace) -> int:
    from fxdurable.backends import migrate_store

    migrated = migrate_store(args.store_url)
    if migrated is None:
        print("the store is up to date")
        return 0
    what, before, after = migrated
    if before == after:  # before 0: a store made by this command
        print(f"{what} is at version {after}: nothing to migrate")
    else:
        print(f"migrated the {what} from version {before} to {after}")
    return 0
