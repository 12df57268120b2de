"""The blob audit (``fxdurable check --blobs``, docs/erasure.md) on every store of the ``store``
fixture (tests/stores/conftest.py): a completed erase leaves no blob that no session names, a
session whose erase is in progress names what its marker recorded, and a blob put by hand and
never named is reported by its digest, only with ``blobs``."""

from __future__ import annotations

import io
import json

from fxdurable.cli.check import run_check
from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.journal.blob_refs import MANIFEST_KEY
from fxdurable.core.records import AttachmentRef, Usage
from fxdurable.core.session_state import StateWrites
from fxdurable.core.store import Store
from fxdurable.runtime.erase import erase_session
from fxdurable.testing.blob_invariants import BLOB_UNREFERENCED, check_blobs
from fxdurable.testing.clock import FakeClock


def _png(digest: str) -> AttachmentRef:
    return AttachmentRef(media_type="image/png", digest=digest, size=1)


def _turn(journal: Journal, session_id: str, *digests: str) -> None:
    """One settled turn of ``session_id`` whose prompt attaches ``digests``."""
    sub = journal.admit(
        session_id, agent="a", prompt="look", attachments=tuple(_png(d) for d in digests)
    ).submission
    fence = journal.claim(session_id, WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    start = journal.begin_attempt(fence, sub.id, worker="w")
    journal.record_model_call(
        fence, start.turn.id, round_=0, text="ok", tool_calls=[], policies=[], usage=Usage()
    )
    journal.settle(fence, sub.id, "completed", text="ok")
    journal.release(fence)


def _unreferenced(store: Store) -> list[str]:
    found = check_blobs(store).violations
    assert {v.code for v in found} <= {BLOB_UNREFERENCED}
    return [v.detail.split()[1] for v in found]  # "blob <digest> is named by no session..."


def _check(store: Store, *, blobs: bool) -> tuple[int, str]:
    out = io.StringIO()
    return run_check(store, blobs=blobs, out=out), out.getvalue()


def test_an_erase_leaves_no_unreferenced_blob_and_a_planted_one_is_reported(
    store: Store,
) -> None:
    journal = Journal(store, FakeClock(), RandomIds())
    shared, own = store.put_blob(b"shared picture"), store.put_blob(b"a's own picture")
    file = store.put_blob(b"a file of b's workspace")
    manifest = store.put_blob(json.dumps({"notes.txt": file}).encode())
    _turn(journal, "a", shared, own)
    _turn(journal, "b", shared)
    # The file is named only through b's workspace manifest.
    journal.update_state("b", lambda state: StateWrites(set={MANIFEST_KEY: manifest}))
    assert check_blobs(store).blobs == 4 and _unreferenced(store) == []

    report = erase_session(journal, "a")
    assert (report.blobs_deleted, report.blobs_kept) == ([own], [shared])
    assert check_blobs(store).blobs == 3 and _unreferenced(store) == []

    orphan = store.put_blob(b"put, never named")  # a kill before its record's commit
    assert _unreferenced(store) == [orphan]
    code, out = _check(store, blobs=False)
    assert code == 0 and orphan not in out, out
    code, out = _check(store, blobs=True)
    assert code == 1, out
    lines = out.splitlines()
    assert lines[0].startswith(f"{BLOB_UNREFERENCED}: session *: blob {orphan} "), out
    assert "safe to delete" in lines[0] and "never committed" in lines[0], out
    assert lines[1:] == [f"1 invariant violation(s) in {store.url}"], out

    # b's erase stopped after its records: its attachment is named only by its marker, the
    # file only by the manifest its state still names. The erase's blobs are not reported.
    journal.begin_erase("b")
    while journal.erase_records("b"):
        pass
    assert journal.read(lambda v: v.submissions("b")) == []
    assert _unreferenced(store) == [orphan]

    erase_session(journal, "b")  # resumed: deletes the shared blob, the manifest and the file
    assert check_blobs(store).blobs == 1 and _unreferenced(store) == [orphan]
    store.delete_blob(orphan)
    code, out = _check(store, blobs=True)
    assert (code, out) == (
        0,
        "ok: 0 sessions, 0 submissions, 0 tool tasks, 0 events, 0 blobs; every invariant holds\n",
    )
