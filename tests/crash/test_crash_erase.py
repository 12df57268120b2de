"""An erase SIGKILLed mid-way (issue 28 §3): a real ``fxdurable erase`` process dies at
``erase.after-marker`` (the marker committed, nothing deleted) and, run again, at
``erase.after-batch`` (a batch of records deleted, the rest there). Each time the store holds
everything or a resumable erase: the session is still recorded, with its marker, invisible to
callers and never claimed by a worker. A third run completes it ("an interrupted erase
completed"): nothing of the session is left, the invariants of the store hold, and no blob is
left that no session names (``fxdurable check --at-rest --blobs``)."""

from __future__ import annotations

import sys

from crash_harness import CrashHarness, assert_clean, assert_crashed, run_process

from fxdurable.backends import open_store
from fxdurable.core.journal._base import ERASE_KEY
from fxdurable.testing.blob_invariants import BlobSummary, check_blobs
from fxdurable.testing.invariants import check_store
from tests.kit.story import SESSION


def _erase(crash: CrashHarness, crash_at: str | None = None) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "fxdurable", "erase", SESSION, "--store", crash.store_url]
    return run_process(argv, crash_at=crash_at)


def _left(crash: CrashHarness) -> tuple[object, int, int, int]:
    return crash.read(
        lambda v: (
            v.get_session(SESSION),
            len(v.events(SESSION)),
            len(v.messages(SESSION)),
            len(v.submissions(SESSION)),
        )
    )


def _blobs(crash: CrashHarness) -> BlobSummary:
    store = open_store(crash.store_url)
    try:
        return check_blobs(store)
    finally:
        store.close()


def _calls(view: object) -> int:
    subs = view.submissions(SESSION)  # type: ignore[attr-defined]
    return sum(len(view.model_calls(s.id)) for s in subs)  # type: ignore[attr-defined]


def test_an_erase_killed_mid_way_is_resumed_and_completes(crash: CrashHarness) -> None:
    assert_clean(crash.run(None), "the story")
    session, events, messages, subs = _left(crash)
    assert session is not None and events and messages and subs
    assert crash.read(_calls) > 0

    assert_crashed(_erase(crash, "erase.after-marker"), "erase.after-marker")
    marked, *counts = _left(crash)
    assert marked is not None and ERASE_KEY in marked.state, "the marker came first"
    # Nothing deleted; the marker is one more event (its state.changed).
    assert counts == [events + 1, messages, subs], "nothing deleted before the marker's commit"

    assert_crashed(_erase(crash, "erase.after-batch"), "erase.after-batch")
    still, *counts = _left(crash)
    assert still is not None and ERASE_KEY in still.state
    # The first batch is the turns' model calls and attempts (dependents go first); the
    # messages, events and submissions they are found from are still there.
    assert counts == [events + 1, messages, subs]
    assert crash.read(_calls) == 0, "one batch was deleted"

    # fxdurable check names the interrupted erase (and nothing of the subset it left).
    summary = crash.read(lambda v: check_store(v, now=0.0, at_rest=True))
    assert [(v.code, v.session_id) for v in summary.violations] == [("erase-incomplete", SESSION)]
    # The blobs the session names are its marker's, the erase's to delete: none is reported.
    assert _blobs(crash).violations == ()

    code, out, err = _erase(crash)
    assert_clean((code, out, err), "the resumed erase")
    assert "an interrupted erase completed" in out, out
    assert _left(crash) == (None, 0, 0, 0)
    summary = crash.read(lambda v: check_store(v, now=0.0, at_rest=True))
    assert summary.violations == ()
    argv = [sys.executable, "-m", "fxdurable", "check", "--store", crash.store_url]
    code, out, err = run_process([*argv, "--at-rest", "--blobs"])
    assert_clean((code, out, err), "fxdurable check --at-rest --blobs")
    assert out.endswith(" blobs; every invariant holds\n"), out
