"""The store as a tool sees it: reads (:class:`ToolRecords`, ``ctx.records``) and the one write
a tool may make outside its session's state, a content-addressed blob (:class:`BlobWriter`,
``ctx.blobs``).

Neither reaches ``Store.transact``: every write to a record is a named journal method, and a
tool's writes to its session go through ``ctx.state``, which commits with the call's result.
A blob changes no record (same bytes, same digest; nothing refers to it until a state write
names it), so putting one twice, or from a call that crashes before its result, is harmless.
The layer test (``tests/test_layer_matrix.py``) forbids the tools we ship from reaching
``transact`` by any other way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fxdurable.core.records import SessionRecord, ToolTaskRecord
    from fxdurable.core.store import Store
    from fxdurable.runtime.models.base import ChatMessage

__all__ = ["BlobWriter", "ToolRecords"]


class ToolRecords:
    """Read-only: the reads the tools we ship use (a session's record, a turn's tool tasks,
    a blob), each one consistent snapshot of the store."""

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def url(self) -> str:
        """The store's URL: what names it in a process's caches (a blob cache, a session's
        root), never a connection to it."""
        return self._store.url

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's record as last committed, or None when there is none."""
        return self._store.read(lambda view: view.get_session(session_id))

    def tool_tasks(self, turn_id: str) -> Sequence[ToolTaskRecord]:
        """The turn's tool tasks as last committed, by (round, index): how its earlier calls
        ended (``fxdurable demo``'s check reads which deploy was left unknown)."""
        return self._store.read(lambda view: view.tool_tasks(turn_id))

    def conversation(self, session_id: str) -> Sequence[ChatMessage]:
        """The session's conversation as the model is sent it now (the latest summary's
        messages left out; stored images by digest, not loaded): what a driven turn
        (``fxdurable.adapters._driven``) replays a framework's loop from."""
        from fxdurable.runtime.history import build_history

        return self._store.read(
            lambda view: (
                build_history(
                    view.messages(session_id), view.session_tool_tasks(session_id)
                ).messages
            )
        )

    def get_blob(self, digest: str) -> bytes | None:
        """The blob under ``digest``, or None (see ``Store.get_blob``: verified)."""
        return self._store.get_blob(digest)


class BlobWriter:
    """Puts content-addressed blobs: the one write a tool makes past ``ctx.state`` (see the
    module for why it needs no fence)."""

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def url(self) -> str:
        return self._store.url

    def put(self, data: bytes) -> str:
        """Store ``data`` and return its digest; idempotent. Raises
        :class:`~fxdurable.errors.BlobTooLargeError` past ``MAX_BLOB_BYTES``."""
        return self._store.put_blob(data)
