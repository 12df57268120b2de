"""``fxdurable migrate STORE_URL``: apply the schema migrations a store lacks.

A PostgreSQL store never migrates itself on open once it holds data (a shared database's
schema changes when its operator says so): opening an outdated one raises
:class:`~fxdurable.stores.postgres.SchemaOutdatedError`, which names this command. A SQLite
file is migrated by the open itself, so the command opens it; Redis and DynamoDB stores have no
schema to migrate.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("migrate", help="apply the schema migrations a store lacks")
    cmd.add_argument("store_url", metavar="STORE_URL", help="e.g. postgresql://u@host/db")


def run(args: argparse.Namespace) -> int:
    from fxdurable.backends import migrate_store

    versions = migrate_store(args.store_url)
    if versions is None:
        print("the store is up to date")
    elif versions[0] == versions[1]:
        print(f"schema is at version {versions[1]}: nothing to migrate")
    else:
        print(f"migrated the schema from version {versions[0]} to {versions[1]}")
    return 0
