"""What an invariant checker reports: one broken rule, in one session.

Its own module so that the checkers (:mod:`fxdurable.testing.invariants` and the ones it
calls, such as :mod:`fxdurable.testing.questions`) all build on it without importing each
other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Violation"]


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    session_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: session {self.session_id}: {self.detail}"
