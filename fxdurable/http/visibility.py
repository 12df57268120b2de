"""Which sessions a caller sees: its own (owner = its principal, key in its namespace), and,
under ``--dev`` (:attr:`HttpSettings.dev`: ``show_unowned``), those made in process (owner None), by
their plain id or a fork's key in the caller's namespace.

``make demo`` runs its turn in process, as session ``engineer`` with no owner; the console,
served by ``fxdurable serve --dev``, opens it as ``#/sessions/engineer``. Writes to such a
session (a prompt, steering, an answer, a fork from it) are made without an owner, as the
in-process code that made it would. With bearer tokens nobody sees an unowned session.
"""

from __future__ import annotations

from fxdurable.core.records import SessionRecord
from fxdurable.core.store import ReadView
from fxdurable.http.scoping import session_key

__all__ = ["find_session", "visible"]


def visible(session: SessionRecord, principal: str, show_unowned: bool) -> bool:
    return session.owner == principal or (show_unowned and session.owner is None)


def find_session(
    view: ReadView, principal: str, public_id: str, show_unowned: bool
) -> SessionRecord | None:
    """``principal``'s session ``public_id``, else (``show_unowned``) the unowned one of that
    plain id, else None. One read, two with ``show_unowned`` when the first finds none."""
    # The key already scopes it; the owner check keeps an in-process session whose id looks
    # like a key (``rt.session("alice/x")``, owner None) out of alice's reach.
    session = view.get_session(session_key(principal, public_id))
    if session is not None and visible(session, principal, show_unowned):
        return session
    if show_unowned:
        plain = view.get_session(public_id)
        if plain is not None and plain.owner is None:
            return plain
    return None
