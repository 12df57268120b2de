"""What names a blob: the one definition the erase and ``fxdurable check --blobs`` share.

A session names a blob when

- a value of its state is the blob's digest (a stored workspace's files under
  ``fx.ws:<path>``, its base manifest under :data:`MANIFEST_KEY`), or is that manifest and
  the blob is one of its entries (the manifest is a blob of JSON ``{path: digest}``);
- one of its submissions (a prompt's attachments), messages or tool tasks (a tool result's)
  attaches it;
- it is being erased and its marker (``fx.erase``, :mod:`fxdurable.core.journal.erase`)
  recorded the digest: such a blob is the erase's, to delete or keep when it completes.

The erase (:mod:`fxdurable.runtime.erase`) keeps a candidate that another session, not
being erased, names; the blob audit (:mod:`fxdurable.testing.blob_invariants`) reports a
stored blob that no session names. A blob a store holds that nothing names is what an
erase that did not delete it leaves, or a put whose record never committed (blobs are put
first: :mod:`fxdurable.core.blobs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from fxdurable.core.blobs import is_digest
from fxdurable.core.records import AttachmentRef, SessionRecord
from fxdurable.core.store import ReadView

from ._base import ERASE_KEY

__all__ = [
    "MANIFEST_KEY",
    "Manifests",
    "attachment_digests",
    "blobs_named",
    "every_named_blob",
    "manifest_entries",
    "marker_digests",
    "state_digests",
]

# The stored workspace's manifest key (fxdurable.tools.stored_files.BASE_KEY; core may not
# import tools): its blob lists more blobs.
MANIFEST_KEY = "fx.ws"

GetBlob = Callable[[str], bytes | None]


def _digests(refs: Iterable[AttachmentRef]) -> list[str]:
    return [r.digest for r in refs if r.digest is not None]


def state_digests(session: SessionRecord) -> list[str]:
    """The digests among ``session``'s state values (a manifest's entries not expanded)."""
    return [v for v in session.state.values() if isinstance(v, str) and is_digest(v)]


def attachment_digests(view: ReadView, session: SessionRecord) -> list[str]:
    """The digests ``session``'s submissions, messages and tool tasks attach (three reads)."""
    found: list[str] = []
    for sub in view.submissions(session.id):
        found += _digests(sub.attachments)
    for message in view.messages(session.id):
        found += _digests(message.attachments)
    for task in view.session_tool_tasks(session.id):
        found += _digests(task.attachments)
    return found


def blobs_named(view: ReadView, session: SessionRecord) -> list[str]:
    """Every blob digest ``session``'s records name: state values, attachments. A manifest's
    entries are not among them (reading the manifest is a blob read, outside any
    transaction: :class:`Manifests`)."""
    return list(dict.fromkeys(state_digests(session) + attachment_digests(view, session)))


def marker_digests(session: SessionRecord) -> tuple[str, ...]:
    """The digests ``session``'s erase marker recorded; () when it is not being erased."""
    marker = session.state.get(ERASE_KEY)
    named = marker.get("blobs") if isinstance(marker, dict) else None
    return tuple(str(d) for d in named) if isinstance(named, list) else ()


def manifest_entries(get_blob: GetBlob, digest: str) -> list[str]:
    """The blob digests a stored workspace's manifest (``{path: digest}`` JSON) lists; none
    when the manifest is missing or is not one."""
    data = get_blob(digest)
    if data is None:
        return []
    try:
        entries = json.loads(data)
    except ValueError:
        return []
    if not isinstance(entries, dict):
        return []
    return [d for d in entries.values() if isinstance(d, str) and is_digest(d)]


class Manifests:
    """The blobs sessions' states name, each distinct manifest read once (every session of
    one template, and every fork, shares its manifest)."""

    def __init__(self, get_blob: GetBlob) -> None:
        self._get_blob = get_blob
        self._entries: dict[str, list[str]] = {}

    def named_by_state(self, session: SessionRecord) -> set[str]:
        """The digests ``session``'s state names, its manifest's entries included."""
        refs = set(state_digests(session))
        manifest = session.state.get(MANIFEST_KEY)
        if isinstance(manifest, str) and is_digest(manifest):
            if manifest not in self._entries:
                self._entries[manifest] = manifest_entries(self._get_blob, manifest)
            refs.update(self._entries[manifest])
        return refs


def every_named_blob(view: ReadView, get_blob: GetBlob) -> set[str]:
    """Every digest some session of the store names (see the module), those of sessions being
    erased included: one record read per session, three ranges per session for its
    attachments, and each distinct manifest once."""
    manifests = Manifests(get_blob)
    named: set[str] = set()
    for session in view.list_sessions():
        named |= manifests.named_by_state(session)
        named.update(attachment_digests(view, session))
        named.update(marker_digests(session))
    return named
