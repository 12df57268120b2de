"""The blob audit (``fxdurable check --blobs``): no blob left that no session names.

Opt-in, and not one of the crash invariants :func:`~fxdurable.testing.invariants.check_store`
proves: a blob nobody names is also what a kill between a ``put_blob`` and the commit of the
record naming it leaves (a prompt's attachments are put before its admission, a workspace file
mid-tool), which the random-kill tests cause on purpose and which harms nothing (nothing reads
it). What it finds is storage to reclaim, left by an erase that did not delete a blob or by a
put whose record never committed. What names a blob is
:mod:`fxdurable.core.journal.blob_refs`, the definition the erase decides with, so a completed
erase leaves nothing to report; a session whose erase is in progress names what its marker
recorded (the erase deletes those, and ``check --at-rest`` reports it as ``erase-incomplete``).

The digests are listed first, then every reference is read in one snapshot: a blob put and
named in between is seen named. On a store in use, a put whose record has not committed yet,
or a blob an erase deletes meanwhile, can still be reported: act on what it reports at rest.

Cost: read-only, O(blobs + records): one pass of ``store.blob_digests()``, and per session its
record and three ranges (submissions, messages, tool tasks), and each distinct workspace
manifest once.
"""

from __future__ import annotations

from dataclasses import dataclass

from fxdurable.core.journal.blob_refs import every_named_blob
from fxdurable.core.store import Store
from fxdurable.testing.violations import Violation

__all__ = ["BLOB_UNREFERENCED", "BlobSummary", "check_blobs"]

BLOB_UNREFERENCED = "blob-unreferenced"


@dataclass(frozen=True, slots=True)
class BlobSummary:
    blobs: int  # the blobs the store holds
    violations: tuple[Violation, ...]  # one per blob no session names, by digest


def check_blobs(store: Store) -> BlobSummary:
    """Every blob of ``store`` that no session names, as a ``blob-unreferenced`` violation
    (see the module)."""
    stored = dict.fromkeys(store.blob_digests())  # first: see the module
    named = store.read(lambda view: every_named_blob(view, store.get_blob))
    violations = tuple(
        Violation(
            BLOB_UNREFERENCED,
            "*",
            f"blob {digest} is named by no session: left by an erase that did not delete it "
            "or by a put whose record never committed; safe to delete (store.delete_blob) "
            "while no worker runs",
        )
        for digest in sorted(stored)
        if digest not in named
    )
    return BlobSummary(blobs=len(stored), violations=violations)
