"""Every error the HTTP API answers with: a status, a stable ``code`` and a readable message.

Clients branch on ``code`` (stable across releases), people read ``message``; ``error`` names
the library exception behind it when there is one (e.g. ``AgentBusyError``). No route answers
with a stack trace: unexpected exceptions become ``internal`` and go to the server log only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError"]


class ApiError(Exception):
    """A request the API refuses, answered as ``{"code", "message"[, "error"]}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        error: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.error = error
        self.headers = headers or {}
        super().__init__(f"{status} {code}: {message}")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.error is not None:
            body["error"] = self.error
        return body


def unauthorized() -> ApiError:
    return ApiError(
        401, "unauthorized", "missing or invalid credentials: send 'Authorization: Bearer <token>'"
    )


def session_not_found(session_id: str) -> ApiError:
    # The same answer for a missing and a foreign session: an id reveals nothing.
    return ApiError(404, "session_not_found", f"no session {session_id!r}")


def invalid(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)
