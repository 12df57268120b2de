"""Writes ``tests/crash/fixtures/previous-release{,-redis,-dynamodb}/``: the store and the
outside world the previous release (``tests/previous_release.py``: ``PREVIOUS``) left when it
was SIGKILLed after the story's unsafe ``deploy`` took effect and before its result was
recorded (``tool.after-execute:deploy``), on SQLite, Redis and DynamoDB.
``test_previous_release_store.py`` continues each with today's code. Run it from the project
root when ``PREVIOUS`` moves (naming stores makes only theirs):

    .venv/bin/python tests/crash/make_previous_release_store.py [sqlite] [redis] [dynamodb]

It runs that commit's own crash driver (``tests/crash/driver.py`` of the commit) with the
commit's ``fxdurable`` first on the path. SQLite: the write-ahead log (the kill leaves one)
is folded into the file, so the fixture is one file. Redis and DynamoDB: the driver runs on a
``redis-server`` (AOF on) or a serial moto server (one request at a time: the runtime's
heartbeat commits beside its turn) started here, with an S3 bucket taking every record past
256 bytes, and the fixture is the store's portable dump (``store.json``, ``store_dumps.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _path in (HERE.parents[1], HERE.parent, HERE):  # the root (bench), tests, tests/crash
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from previous_release import PREVIOUS, previous_tree  # noqa: E402
from store_dumps import dump_dynamodb, dump_redis  # noqa: E402

FIXTURES = {
    "sqlite": HERE / "fixtures" / "previous-release",
    "redis": HERE / "fixtures" / "previous-release-redis",
    "dynamodb": HERE / "fixtures" / "previous-release-dynamodb",
}
FIXTURE = FIXTURES["sqlite"]
STORE = "store.sqlite3"
DUMP = "store.json"  # the Redis and DynamoDB fixtures' store
CRASH_AT = "tool.after-execute:deploy"
PREFIX = "old"  # the Redis store's key prefix (the dump names keys without it)
OFFLOAD_BYTES = 256  # DynamoDB: records past this go to the bucket (as the crash suite's)


def _kill_old_driver(tree: Path, store: str, world: Path, env: dict[str, str]) -> None:
    dropped = ("FXD_", "AWS_PROFILE", "AWS_SESSION_TOKEN")  # no machine's AWS profile either
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)} | env
    env.update(PYTHONPATH=str(tree), FXD_CRASH_AT=CRASH_AT, NO_COLOR="1")
    driver = tree / "tests" / "crash" / "driver.py"
    argv = [sys.executable, str(driver), "--store", store, "--dir", str(world)]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != -signal.SIGKILL:
        raise SystemExit(f"the old driver did not die at {CRASH_AT}:\n{done.stderr}")


@contextmanager
def _old_crash(dest: Path) -> Iterator[tuple[Path, Path]]:
    """The old tree and an output directory (with its ``world``), copied to ``dest`` (made
    anew, with a ``PREVIOUS`` file) once the block has written it."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = previous_tree(Path(scratch) / "tree")
        work = Path(scratch) / "out"
        (work / "world").mkdir(parents=True)
        yield tree, work
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work, dest)
        (dest / "PREVIOUS").write_text(PREVIOUS + "\n")


def _write_dump(path: Path, dump: dict[str, object]) -> None:
    path.write_text(json.dumps({"previous": PREVIOUS, **dump}, indent=1, sort_keys=True) + "\n")


def make(dest: Path = FIXTURES["sqlite"]) -> Path:
    with _old_crash(dest) as (tree, work):
        _kill_old_driver(tree, f"sqlite:///{work / STORE}", work / "world", {})
        with sqlite3.connect(work / STORE) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        for leftover in ("-wal", "-shm"):
            (work / (STORE + leftover)).unlink(missing_ok=True)
    return dest


def make_redis(dest: Path = FIXTURES["redis"]) -> Path:
    from bench.redis_server import RedisServer

    with tempfile.TemporaryDirectory() as data, RedisServer(Path(data), appendonly=True) as server:
        store = server.store_url(0, PREFIX)
        with _old_crash(dest) as (tree, work):
            _kill_old_driver(tree, store, work / "world", {})
            _write_dump(work / DUMP, dump_redis(store))
    return dest


def make_dynamodb(dest: Path = FIXTURES["dynamodb"]) -> Path:
    from aws_support import aws_environment
    from dynamo_support import dynamo_url

    from bench.moto_server import moto_server

    with tempfile.TemporaryDirectory() as data, moto_server(Path(data), serial=True) as endpoint:
        store = dynamo_url(endpoint, offload_threshold=OFFLOAD_BYTES)  # the old driver makes it
        with _old_crash(dest) as (tree, work):
            _kill_old_driver(tree, store, work / "world", aws_environment(Path(data)))
            _write_dump(work / DUMP, dump_dynamodb(store))
    return dest


MAKERS: dict[str, Callable[[], Path]] = {
    "sqlite": make,
    "redis": make_redis,
    "dynamodb": make_dynamodb,
}


if __name__ == "__main__":
    for name in sys.argv[1:] or list(MAKERS):
        if name not in MAKERS:
            raise SystemExit(f"no store {name!r}: name some of {', '.join(MAKERS)}")
        print(f"wrote {MAKERS[name]()}")
