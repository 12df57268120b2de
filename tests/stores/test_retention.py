"""Retention by last activity (docs/erasure.md "Retention") on every store: with the journal's
clock injected (never a sleep), one sweep erases the idle session past its retention, leaving
nothing of it in the raw store, and keeps a busy one, one active again since, and one whose
agent keeps sessions forever."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

import fxdurable as fx
from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.records import Usage
from fxdurable.core.retention import DAY_S, NotDue, due_sessions
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Store
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.erase import erase_session
from fxdurable.runtime.retention import sweep_retention
from fxdurable.testing.clock import FakeClock
from tests.stores.conftest import FACTORIES, MARKS

STORES = ["sqlite", "redis", "dynamodb", "postgres"]


@pytest.fixture(params=[pytest.param(n, marks=MARKS.get(n, ())) for n in STORES])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store = FACTORIES[request.param](request, tmp_path)
    yield store
    store.close()


def _raw(store: Store, tmp_path: Path) -> bytes:
    if store.url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in tmp_path.glob("contract.db*"))
    from tests.stores.test_erase_raw import raw

    return raw(store)


def _turn(journal: Journal, session_id: str, prompt: str, days: float | None) -> None:
    """One turn of ``session_id`` through the journal, admitted and settled at the clock."""
    sub = journal.admit(session_id, agent="a", prompt=prompt, retention_days=days).submission
    fence = journal.claim(session_id, WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    start = journal.begin_attempt(fence, sub.id, worker="w")
    journal.record_model_call(
        fence, start.turn.id, round_=0, text=f"ok {prompt}", tool_calls=[], policies=[],
        usage=Usage(),
    )  # fmt: skip
    journal.settle(fence, sub.id, "completed", text=f"ok {prompt}")
    journal.release(fence)


def test_one_sweep_erases_only_the_idle_session_past_its_retention(
    any_store: Store, tmp_path: Path
) -> None:
    clock = FakeClock()
    journal = Journal(any_store, clock, RandomIds())
    prompts = {s: f"PROMPT-retention-{s}-5eed" for s in ("old", "busy", "recent", "forever")}
    for session_id, prompt in prompts.items():
        _turn(journal, session_id, prompt, None if session_id == "forever" else 1)
    # "busy": a second prompt queued (no worker ran it), so it is not idle.
    journal.admit("busy", agent="a", prompt="again", retention_days=1)
    clock.advance(0.5 * DAY_S)
    _turn(journal, "recent", "PROMPT-retention-recent-again", 1)  # active again since
    clock.advance(0.7 * DAY_S)  # "old" idle 1.2 days, "recent" 0.7 days

    report = sweep_retention(journal)

    assert report.erased == ["old"] and report.kept == []
    after = journal.read(lambda v: {s.id: s for s in v.list_sessions()})
    assert sorted(after) == ["busy", "forever", "recent"]
    assert after["busy"].status == SessionStatus.ACTIVE and after["busy"].retain_until is None
    assert after["forever"].retain_until is None
    raw = _raw(any_store, tmp_path)
    assert prompts["old"].encode() not in raw
    for kept in ("busy", "recent", "forever"):
        assert prompts[kept].encode() in raw, kept  # the search finds what is there
    # A second sweep finds nothing; once "recent" is past its retention too, it goes.
    assert sweep_retention(journal).erased == []
    clock.advance(0.4 * DAY_S)
    assert sweep_retention(journal).erased == ["recent"]
    clock.advance(10_000 * DAY_S)
    assert sweep_retention(journal).erased == []  # busy and forever stay
    assert journal.read(lambda v: sorted(s.id for s in v.list_sessions())) == ["busy", "forever"]


def test_the_erase_rechecks_due_ness_so_a_session_active_again_is_kept(
    any_store: Store,
) -> None:
    clock = FakeClock()
    journal = Journal(any_store, clock, RandomIds())
    _turn(journal, "s1", "first", 2)
    clock.advance(3 * DAY_S)
    due = journal.read(lambda v: due_sessions(v, clock.now(), limit=10))
    assert due == ["s1"]
    journal.admit("s1", agent="a", prompt="back again", retention_days=2)  # after the read
    with pytest.raises(NotDue):
        erase_session(journal, "s1", only_if_due=True)
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None and "fx.erase" not in session.state
    assert len(journal.read(lambda v: v.submissions("s1"))) == 2


def test_the_sweep_reads_the_earliest_due_a_batch_at_a_time(any_store: Store) -> None:
    clock = FakeClock()
    journal = Journal(any_store, clock, RandomIds())
    for n in range(5):
        _turn(journal, f"s{n}", f"p{n}", 1)
        clock.advance(60)
    clock.advance(DAY_S - 150)  # s0, s1 and s2 are due; s3 and s4 not yet
    assert journal.read(lambda v: due_sessions(v, clock.now(), limit=2)) == ["s0", "s1"]
    report = sweep_retention(journal, batch=2)
    assert sorted(report.erased) == ["s0", "s1", "s2"]
    assert journal.read(lambda v: sorted(s.id for s in v.list_sessions())) == ["s3", "s4"]


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "7", True])
def test_retention_days_must_be_a_positive_number_or_none(bad: object) -> None:
    model = fx.ScriptedModel([fx.reply("ok")])
    with pytest.raises(ConfigurationError, match="retention_days"):
        fx.Agent("a", model, retention_days=bad)  # type: ignore[arg-type]
    assert fx.Agent("a", model).retention_days is None
    assert fx.Agent("a", model, retention_days=30).retention_days == 30.0
    assert fx.Agent("a", model, retention_days=0.5).retention_days == 0.5


def test_fxdurable_scan_sweeps_by_the_wall_clock(tmp_path: Path) -> None:
    """``fxdurable scan``'s sweep (``sweep_once``): the store alone, no agents, no queue."""
    from fxdurable.stores.sqlite import SqliteStore
    from fxdurable.workers.scan import sweep_once

    url = f"sqlite:///{tmp_path}/contract.db"
    store = SqliteStore(url)
    try:
        journal = Journal(store, FakeClock(1_700_000_000.0), RandomIds())  # long ago
        _turn(journal, "old", "PROMPT-retention-wall-clock", 1)
        _turn(journal, "kept", "kept forever", None)
    finally:
        store.close()
    assert sweep_once(url).erased == ["old"]
    assert b"PROMPT-retention-wall-clock" not in _raw_file(tmp_path)
    assert sweep_once(url).erased == []


def _raw_file(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.glob("contract.db*"))
