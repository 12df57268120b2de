"""A fork of a 10,000-event session, on every store (issue 22 §3; 3,000 on moto, see
EVENTS_ON_MOTO).

DynamoDB commits at most 100 items at once, and a fork of a long session writes thousands:
``POST /sessions/{id}/fork`` past about 95 records answered 500. Now its records are staged
in the new session's partition first and made visible by one last commit
(fxdurable/stores/_ddb_stage.py); SQLite and Redis commit the fork in one transaction as
before. Each test builds the session by direct journal writes (no model turns), forks it
whole and at a point half way, and checks the fork against its source and the invariants;
on DynamoDB a fork SIGKILLed mid-copy leaves no session, and the same fork retried finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from long_sessions import SESSION, built_sqlite, load_into

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.store import ReadView, Store
from fxdurable.testing.invariants import check_store

# Each builds and copies a 10,000-event session (DynamoDB: ~30,000 items onto moto).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EVENTS = 10_000
# On moto every TransactWriteItems deep-copies the table: with a 10,000-event session loaded
# (about 27,000 items) the fork's one commit took past the store's 10 s read timeout on a
# loaded machine (it passed at 10,000 on an idle one, in 5 minutes). 3,000 events still make a
# fork of about 4,000 items, forty times what one TransactWriteItems holds.
EVENTS_ON_MOTO = 3_000
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "redis", "dynamodb"])
def long_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Store]]:
    """(its length, a store) holding session ``long`` of that many events or more, at rest."""
    events = EVENTS_ON_MOTO if request.param == "dynamodb" else EVENTS
    built = built_sqlite(tmp_path_factory.mktemp("long"), events)
    if request.param == "sqlite":
        from fxdurable.stores.sqlite import SqliteStore

        url = f"sqlite:///{built}"
        store: Store = SqliteStore(url)
    elif request.param == "redis":
        request.applymarker(pytest.mark.redis)
        from fxdurable.stores.redis import RedisStore

        url = str(request.getfixturevalue("redis_url"))
        store = RedisStore(url)
        load_into(store, built)
    else:
        request.applymarker(pytest.mark.aws)
        from aws_support import aws_session
        from dynamo_support import dynamo_url

        from fxdurable.stores.dynamodb import DynamoStore

        # The threaded server: one writer at a time here, and the serial one is slower.
        url = dynamo_url(request.getfixturevalue("moto_server"))
        store = DynamoStore(url, session=aws_session())
        load_into(store, built)
    try:
        yield events, store
    finally:
        store.close()


def _shape(view: ReadView, session_id: str) -> tuple[list[tuple[str, str]], list[str]]:
    messages = [(m.role, m.text) for m in view.messages(session_id)]
    tasks = [f"{t.tool}:{t.status}:{t.result}" for t in view.session_tool_tasks(session_id)]
    return messages, tasks


def _clean(store: Store) -> None:
    summary = store.read(lambda v: check_store(v, now=0.0, at_rest=True))
    assert summary.violations == (), summary.violations[:5]


def test_a_ten_thousand_event_session_forks_whole_and_half_way(
    long_store: tuple[int, Store],
) -> None:
    events, store = long_store
    journal = Journal(store, SystemClock(), RandomIds())
    source = store.read(lambda v: v.get_session(SESSION))
    assert source is not None and source.next_event_seq - 1 >= events
    whole = journal.fork(SESSION, "whole")
    assert whole.created and whole.messages > events // 4, whole  # a round: 3 events
    messages, tasks = store.read(lambda v: _shape(v, "whole"))
    assert (messages, tasks) == store.read(lambda v: _shape(v, SESSION))
    assert journal.fork(SESSION, "whole").created is False  # the same fork, idempotent

    half = journal.fork(SESSION, "half", after=events // 2)
    half_messages, half_tasks = store.read(lambda v: _shape(v, "half"))
    assert 0 < len(half_messages) < len(messages)
    assert half_messages == messages[: len(half_messages)]
    assert 0 < len(half_tasks) < len(tasks)
    assert half.messages == len(half_messages)
    _clean(store)
    listed = store.read(lambda v: sorted(s.id for s in v.list_sessions()))
    assert listed == ["half", SESSION, "whole"]


_FORK_SCRIPT = """
import sys
from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
store = open_store(sys.argv[1])
print(Journal(store, SystemClock(), RandomIds()).fork(sys.argv[2], sys.argv[3]))
"""


def _fork_process(url: str, new_id: str, tmp_path: Path, crash_at: str | None) -> int:
    from aws_support import aws_environment

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "AWS_"))}
    env.update(aws_environment(tmp_path), PYTHONPATH=str(REPO))
    if crash_at:
        env["FXD_CRASH_AT"] = crash_at
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT, url, SESSION, new_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if crash_at:
        assert f"crash injected at {crash_at}" in done.stderr, done.stderr[-3000:]
    else:
        assert done.returncode == 0, done.stderr[-3000:]
    return done.returncode


@pytest.mark.aws
def test_a_fork_killed_mid_copy_on_dynamodb_is_invisible_and_a_retry_finishes_it(
    moto_server: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from aws_support import aws_session
    from dynamo_support import dynamo_url

    from fxdurable.stores.dynamodb import DynamoStore

    url = dynamo_url(moto_server)  # one writer at a time: the threaded server will do
    store = DynamoStore(url, session=aws_session())
    try:
        load_into(store, built_sqlite(tmp_path_factory.mktemp("long"), EVENTS_ON_MOTO))
        killed = _fork_process(url, "f", tmp_path, crash_at="store.mid-stage")
        assert killed == -signal.SIGKILL
        # Some of its records are in the table; the fork is nowhere to be seen.
        staged = store._api.query("S#f", "MSG#")  # type: ignore[attr-defined]
        assert staged, "the kill came before anything was staged: the test proves nothing"
        assert store.read(lambda v: v.get_session("f")) is None
        assert store.read(lambda v: [s.id for s in v.list_sessions()]) == [SESSION]
        _clean(store)
        # The same fork again finishes it: whole, once.
        _fork_process(url, "f", tmp_path, crash_at=None)
        assert store.read(lambda v: _shape(v, "f")) == store.read(lambda v: _shape(v, SESSION))
        _clean(store)
        again = Journal(store, SystemClock(), RandomIds()).fork(SESSION, "f")
        assert again.created is False
    finally:
        store.close()
