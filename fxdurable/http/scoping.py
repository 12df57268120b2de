"""Session ids over HTTP are scoped per principal: ``alice``'s ``ops-1`` is stored as
``alice/ops-1``, ``bob``'s as ``bob/ops-1``, and the two are different sessions.

A caller names its sessions with *public ids* (``ops-1``, :data:`SESSION_ID_PATTERN`); the store
keys them by ``<principal>/<public id>``. With one namespace for everyone an id was an oracle
(404 when another user held it, 201 when free) and could be squatted before its user came
(DESIGN §9). Scoped, nobody can see, probe or take anyone else's ids: a ``POST /chat`` with any
id starts or continues the caller's own session, and every other route answers a public id the
caller does not hold with the 404 of a session that does not exist.

This module is the only place that derives a key: routes turn the public id into the key on
the way in and show the public id on the way out (headers, replies, stream lines). A public
id never contains ``/``, so a key splits back at its last ``/`` whatever the principal holds.

Everything below the HTTP layer sees the key as the session's id: the queue's wake messages,
``POST /wake`` (it names a session by key: it has no principal), the worker log, tools'
``ctx.session_id``, ``fxdurable trace 'alice/ops-1'``, and in-process code
(``rt.session("alice/ops-1")`` continues alice's session). In-process sessions (owner None)
keep plain ids, which no HTTP caller can reach.
"""

from __future__ import annotations

__all__ = [
    "SESSION_ID_PATTERN",
    "SESSION_KEY_PATTERN",
    "namespace",
    "public_session_id",
    "session_key",
]

_SEPARATOR = "/"
_PUBLIC = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
SESSION_ID_PATTERN = rf"^{_PUBLIC}$"
# A session's store key: an in-process id, or a principal's namespace and a public id. A
# principal is what the authenticator returns: anything printable, '/' included.
SESSION_KEY_PATTERN = rf"^(?:[^\x00-\x1f\x7f]{{1,256}}{_SEPARATOR})?{_PUBLIC}$"


def namespace(principal: str) -> str:
    """The prefix of every key of ``principal``'s sessions."""
    return principal + _SEPARATOR


def session_key(principal: str, public_id: str) -> str:
    """The store key of ``principal``'s session ``public_id``."""
    return namespace(principal) + public_id


def public_session_id(key: str) -> str:
    """The public id a session's owner knows it by (an in-process id is its own)."""
    return key.rpartition(_SEPARATOR)[2]
