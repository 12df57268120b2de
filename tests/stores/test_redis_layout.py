"""The Redis store's layout marker and its forward-only migrations (issue 28 §4,
docs/upgrading.md), on a real redis-server: what a writer's open applies, what it refuses,
what ``fxdurable migrate`` does, and the migration loop under racing migrators, a SIGKILLed
one, a failing step and a lost answer.

fxdurable ships no Redis layout step yet (``MIGRATIONS`` is empty), so the tests inject theirs:
each step writes a key of its own and counts its runs in another."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fxdurable.errors import SchemaOutdatedError, StoreError
from fxdurable.stores._layout import Marker, migrate_layout
from fxdurable.stores._redis_layout import RedisLayout, RedisMarker, RedisStep, migrate
from fxdurable.stores._redis_setup import parse_url
from fxdurable.stores._redis_wire import Keys
from fxdurable.stores.redis import RedisStore
from tests.fault_support import fault_proxy, through_proxy
from tests.redis_support import dump, prefix_of

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url.split("?")[0], decode_responses=True)
    yield c
    c.close()


def marker_keys(client: redis.Redis, url: str) -> dict[str, str | None]:
    p = prefix_of(url)
    schema, layout, claim = client.mget([f"{p}:schema", f"{p}:layout", f"{p}:migrating"])
    return {"schema": schema, "layout": layout, "migrating": claim}


def adding(name: str, *, compatible: bool = True, gate: threading.Event | None = None) -> RedisStep:
    """A step that sets ``p:test:<name>`` (idempotent) and counts its runs in
    ``p:test:<name>:runs``; with ``gate``, it waits for the gate once it has counted."""

    def apply(on: RedisLayout) -> None:
        on.client.incr(f"{on.keys.p}:test:{name}:runs")
        if gate is not None:
            assert gate.wait(30), "the test never opened the step's gate"
        on.client.set(f"{on.keys.p}:test:{name}", "done")

    return RedisStep(name=name, compatible=compatible, apply=apply)


def runs(client: redis.Redis, url: str, name: str) -> int:
    return int(client.get(f"{prefix_of(url)}:test:{name}:runs") or 0)


def test_a_new_store_writes_layout_one_as_every_release_reads_it(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url).close()
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": None, "migrating": None}


def test_a_new_store_of_newer_code_is_made_at_its_layout_without_running_steps(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url, migrations=[adding("a")]).close()
    # Compatible steps leave the floor at 1: code of layout 1 opens it (a rolling deploy).
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": "2", "migrating": None}
    assert runs(client, redis_url, "a") == 0
    RedisStore(redis_url, migrations=()).close()


def test_a_writer_applies_a_compatible_step_once_and_old_code_still_opens(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url).close()  # layout 1, as the previous release left it
    step = adding("a")
    RedisStore(redis_url, migrations=[step]).close()
    assert client.get(f"{prefix_of(redis_url)}:test:a") == "done"
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": "2", "migrating": None}
    RedisStore(redis_url, migrations=[step]).close()  # already there: not again
    assert runs(client, redis_url, "a") == 1
    for create in (True, False):  # code of layout 1 ignores what the step added
        RedisStore(redis_url, create=create, migrations=()).close()


def test_a_reader_never_migrates_and_writes_nothing(redis_url: str) -> None:
    RedisStore(redis_url).close()
    before = dump(redis_url)
    RedisStore(redis_url, create=False, migrations=[adding("a")]).close()
    assert dump(redis_url) == before
    with pytest.raises(SchemaOutdatedError, match="fxdurable migrate"):
        RedisStore(redis_url, create=False, migrations=[adding("b", compatible=False)])
    assert dump(redis_url) == before


def test_a_breaking_step_is_refused_on_open_and_applied_by_migrate(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url).close()
    steps = [adding("a"), adding("b", compatible=False)]
    url = RedisStore(redis_url, create=False).url
    expected = re.escape(f"`fxdurable migrate {url}`")
    with pytest.raises(SchemaOutdatedError, match=rf"step 3 \(b\) is breaking.*{expected}"):
        RedisStore(redis_url, migrations=steps)
    assert runs(client, redis_url, "a") == 0  # nothing applied before the refusal
    assert migrate(redis_url, migrations=steps) == (1, 3)
    assert marker_keys(client, redis_url) == {"schema": "3", "layout": None, "migrating": None}
    assert (runs(client, redis_url, "a"), runs(client, redis_url, "b")) == (1, 1)
    assert migrate(redis_url, migrations=steps) == (3, 3)
    RedisStore(redis_url, migrations=steps).close()
    # Code older than the breaking step must not open it, reader or writer.
    for create in (True, False):
        with pytest.raises(StoreError, match=r"only fxdurable of layout 3 or later.*uses layout"):
            RedisStore(redis_url, create=create, migrations=[adding("a")])


def test_a_newer_store_opens_while_its_floor_allows_and_is_refused_past_it(
    redis_url: str, client: redis.Redis
) -> None:
    p = prefix_of(redis_url)
    client.mset({f"{p}:schema": "1", f"{p}:layout": "5"})  # four compatible steps ahead
    RedisStore(redis_url).close()
    client.set(f"{p}:schema", "4")
    with pytest.raises(StoreError, match=r"layout version 5.*layout 4 or later.*layout version 1"):
        RedisStore(redis_url)


@pytest.mark.parametrize(("schema", "layout"), [("fxd", None), ("1", "x"), ("0", None), ("3", "2")])
def test_a_marker_that_is_not_fxdurables_is_refused(
    redis_url: str, client: redis.Redis, schema: str, layout: str | None
) -> None:
    p = prefix_of(redis_url)
    client.set(f"{p}:schema", schema)
    if layout is not None:
        client.set(f"{p}:layout", layout)
    with pytest.raises(StoreError, match="not fxdurable's"):
        RedisStore(redis_url)


def test_migrate_makes_a_missing_store_at_its_layout(redis_url: str, client: redis.Redis) -> None:
    assert migrate(redis_url, migrations=[adding("a"), adding("b", compatible=False)]) == (0, 3)
    assert marker_keys(client, redis_url) == {"schema": "3", "layout": None, "migrating": None}
    assert runs(client, redis_url, "a") == 0


class Watching(RedisMarker):
    """A RedisMarker that tells the test when it has read a marker claimed by someone else:
    a migrator waiting on another's step."""

    def __init__(self, url: str) -> None:
        target, kwargs = parse_url(url)
        super().__init__(redis.ConnectionPool(**kwargs), Keys(target.prefix), target.where)
        self.saw_a_claim = threading.Event()

    def read(self) -> Marker | None:
        found = super().read()
        if found is not None and found.claim is not None:
            self.saw_a_claim.set()
        return found


def test_two_migrators_run_each_step_once(redis_url: str, client: redis.Redis) -> None:
    RedisStore(redis_url).close()
    gate = threading.Event()
    steps = [adding("slow", gate=gate), adding("next")]
    results: dict[str, tuple[int, int]] = {}
    first = threading.Thread(
        target=lambda: results.update(first=migrate(redis_url, migrations=steps))
    )
    first.start()
    second_io = Watching(redis_url)
    second = threading.Thread(
        target=lambda: results.update(
            second=migrate_layout(second_io, steps, url=redis_url, breaking=True)
        )
    )
    try:
        while runs(client, redis_url, "slow") == 0:  # the first holds the step's claim
            assert first.is_alive(), results
            gate.wait(0.01)
        second.start()
        assert second_io.saw_a_claim.wait(10)  # the second is waiting on the first's claim
    finally:
        gate.set()
        first.join(30)
        second.join(30)
    assert results == {"first": (1, 3), "second": (1, 3)}
    assert (runs(client, redis_url, "slow"), runs(client, redis_url, "next")) == (1, 1)
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": "3", "migrating": None}


_KILLED_MIGRATOR = """
import sys, threading
from fxdurable.stores._redis_layout import RedisStep, migrate

def apply(on):
    on.client.set(f"{on.keys.p}:test:started", "1")
    threading.Event().wait()  # killed here, mid-step

migrate(sys.argv[1], migrations=[RedisStep(name="a", compatible=True, apply=apply)],
        claim_ttl_s=1.0)
"""


def test_a_sigkilled_migrators_claim_lapses_and_its_step_runs_again(
    redis_url: str, client: redis.Redis, tmp_path: Path
) -> None:
    RedisStore(redis_url).close()
    script = tmp_path / "migrator.py"
    script.write_text(textwrap.dedent(_KILLED_MIGRATOR))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, str(script), redis_url], env=env)
    p = prefix_of(redis_url)
    try:
        while client.get(f"{p}:test:started") is None:
            assert child.poll() is None, "the migrator exited before its step"
            threading.Event().wait(0.02)
        assert client.pttl(f"{p}:migrating") > 0  # its claim, live
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert marker_keys(client, redis_url)["layout"] is None  # the marker did not move
    assert migrate(redis_url, migrations=[adding("a")]) == (1, 2)  # once the claim lapsed
    assert runs(client, redis_url, "a") == 1
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": "2", "migrating": None}


def test_a_failing_step_leaves_the_store_as_it_was_and_frees_the_step(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url).close()

    def fail(on: RedisLayout) -> None:
        raise ValueError("no room")

    broken = RedisStep(name="a", compatible=True, apply=fail)
    with pytest.raises(StoreError, match=r"layout step 2 \(a\) failed.*no room.*layout version 1"):
        RedisStore(redis_url, migrations=[broken])
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": None, "migrating": None}
    assert migrate(redis_url, migrations=[adding("a")]) == (1, 2)  # no claim to wait out


def test_an_advance_whose_answer_is_lost_is_read_back_and_the_step_not_rerun(
    redis_url: str, client: redis.Redis
) -> None:
    RedisStore(redis_url).close()
    with fault_proxy(redis_url, 6379) as proxy:
        # The advance's operation as its own bulk string: never matches the script's text,
        # which an EVAL carries when the server lacks the script.
        proxy.lose_answer(b"$7\r\nadvance\r\n")
        assert migrate(through_proxy(redis_url, proxy), migrations=[adding("a")]) == (1, 2)
        assert proxy.lost == 1
    assert runs(client, redis_url, "a") == 1
    assert marker_keys(client, redis_url) == {"schema": "1", "layout": "2", "migrating": None}


def test_the_migrate_command_applies_the_layout_steps(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from fxdurable.cli.main import main

    RedisStore(redis_url).close()
    assert main(["migrate", redis_url]) == 0  # today's code has no Redis step
    assert "layout is at version 1: nothing to migrate" in capsys.readouterr().out
