"""Erasing a session (issue 28 §3): the driver of the journal's erase transitions.

``erase_session(journal, session_id)`` runs :mod:`fxdurable.core.journal.erase`'s steps in
order: the marker, the subagent children (each erased the same way, first), the forks'
references to it, its records in batches, the blobs no other session names, and the session
record last. Run again after a kill it resumes: the marker is found, what was deleted stays
deleted, and the rest is completed (every step is idempotent).

Which blobs "no other session references" (the decision, docs/erasure.md): a **scan of
references** at erase time, not a reference count kept with every write. The candidates are
the digests the erased session names (recorded with its marker) plus, for a stored
workspace, the entries of its manifest blob. Another session keeps a candidate when its state
names it (directly, or through its own manifest) or one of its prompts, messages or tool
results attaches it (:mod:`fxdurable.core.journal.blob_refs`: the definition ``fxdurable
check --blobs`` audits with). The state part reads one record per session (``list_sessions``) and
each distinct manifest once; the attachment part reads every other session's submissions,
messages and tool tasks, and runs only while a candidate is still unaccounted for. So an
erase costs O(sessions) reads when the state accounts for every candidate, O(records of the
store) otherwise. A count would make erase O(own records) but would cost every blob write a
transactional update on every store (and every fork, which shares its source's blobs), and
a count that drifts deletes a blob someone names; the scan cannot drift. Sessions being
erased themselves do not keep a blob.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fxdurable.core.journal import Journal
from fxdurable.core.journal._base import ERASE_KEY
from fxdurable.core.journal.blob_refs import Manifests, attachment_digests, manifest_entries
from fxdurable.core.journal.erase import DEFAULT_BATCH
from fxdurable.core.store import ReadView
from fxdurable.errors import RecordNotFoundError, SessionNotFoundError

__all__ = ["EraseReport", "erase_session", "forks_of", "referenced_elsewhere"]


@dataclass(slots=True)
class EraseReport:
    """What one erase did (children's counts included)."""

    session_id: str
    records: int = 0  # records deleted (the session records too)
    children: list[str] = field(default_factory=list)  # subagent sessions erased with it
    forks: list[str] = field(default_factory=list)  # forks that no longer name it
    blobs_deleted: list[str] = field(default_factory=list)
    blobs_kept: list[str] = field(default_factory=list)  # named by another session
    aborted: list[str] = field(default_factory=list)  # submissions force aborted
    resumed: bool = False  # it completed an erase a kill had interrupted


def referenced_elsewhere(
    view: ReadView,
    candidates: Iterable[str],
    erased: str,
    get_blob: Callable[[str], bytes | None],
    *,
    attachments: Iterable[str] = (),
) -> set[str]:
    """The ``candidates`` some session other than ``erased`` (and not being erased) names
    (what names a blob: :mod:`fxdurable.core.journal.blob_refs`). ``attachments``: the
    candidates that were attachments, the only ones whose references need the other
    sessions' records read (see the module)."""
    wanted = set(candidates)
    kept: set[str] = set()
    manifests = Manifests(get_blob)
    others = [s for s in view.list_sessions() if s.id != erased and ERASE_KEY not in s.state]
    for session in others:
        kept |= manifests.named_by_state(session) & wanted
    open_attachments = set(attachments) & (wanted - kept)
    if open_attachments:
        for session in others:
            kept |= set(attachment_digests(view, session)) & open_attachments
    return kept


def forks_of(view: ReadView, session_id: str) -> list[str]:
    """The sessions forked from ``session_id``: their first event names it (one read per
    session; forks are not indexed by source)."""
    found = []
    for session in view.list_sessions():
        first = view.events(session.id, limit=1)
        if first and first[0].data.get("forked_from") == session_id:
            found.append(session.id)
    return found


def erase_session(
    journal: Journal,
    session_id: str,
    *,
    owner: str | None = None,
    force: bool = False,
    batch: int = DEFAULT_BATCH,
    only_if_due: bool = False,
) -> EraseReport:
    """Erase ``session_id`` whole (see the module). Raises
    :class:`~fxdurable.errors.SessionNotFoundError` for no such session (or one ``owner`` does
    not own) and :class:`~fxdurable.errors.SessionBusyError` while a turn is queued or running
    unless ``force`` (its abort is recorded and its lease fenced first). ``only_if_due``:
    the retention sweep's, :class:`~fxdurable.core.retention.NotDue` and nothing erased
    unless the session is due when its marker is recorded (core/retention.py)."""
    try:
        start = journal.begin_erase(session_id, owner=owner, force=force, only_if_due=only_if_due)
    except RecordNotFoundError:
        raise SessionNotFoundError(session_id) from None
    report = EraseReport(session_id, aborted=list(start.aborted), resumed=start.resumed)
    for child in start.children:
        try:
            done = erase_session(journal, child, force=True, batch=batch)
        except SessionNotFoundError:
            continue  # erased already (a resumed erase), or never admitted
        report.children += [child, *done.children]
        report.records += done.records
        report.blobs_deleted += done.blobs_deleted
    for fork in journal.read(lambda view: forks_of(view, session_id)):
        if journal.unlink_fork(fork, session_id):
            report.forks.append(fork)
    store = journal.store
    # The manifest's entries before anything is deleted: the manifest goes last.
    entries = manifest_entries(store.get_blob, start.manifest) if start.manifest else []
    candidates = list(dict.fromkeys([*entries, *start.blobs]))
    if start.manifest in candidates:
        candidates.remove(start.manifest)
        candidates.append(start.manifest)
    while deleted := journal.erase_records(session_id, limit=batch):
        report.records += deleted
    kept = journal.read(
        lambda view: referenced_elsewhere(
            view,
            candidates,
            session_id,
            store.get_blob,
            attachments=candidates,
        )
    )
    for digest in candidates:
        if digest in kept:
            report.blobs_kept.append(digest)
        else:
            store.delete_blob(digest)
            report.blobs_deleted.append(digest)
    journal.finish_erase(session_id)
    report.records += 1
    checkpoint = getattr(store, "checkpoint", None)
    if callable(checkpoint):
        checkpoint()  # SQLite: the deleted pages leave the write-ahead log too
    return report
