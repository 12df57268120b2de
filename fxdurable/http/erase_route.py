"""``DELETE /sessions/{id}``: erase the caller's session (docs/erasure.md), owner-checked like
every session route (a session the caller does not hold is a 404, as one that does not
exist). ``?force=true`` erases while a turn runs: its abort is recorded first; without it a
busy session is a 409 and nothing is erased."""

from __future__ import annotations

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from fxdurable.errors import SessionBusyError, SessionNotFoundError
from fxdurable.http.problems import ApiError, session_not_found
from fxdurable.http.route_base import RouteBase, json_reply, session_id_param
from fxdurable.http.schemas import _Body
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.erase import erase_session

__all__ = ["EraseReply", "EraseRoutes"]


class EraseReply(_Body):
    session_id: str
    records: int = Field(description="records deleted, its subagents' included")
    children: int = Field(description="subagent sessions erased with it")
    forks: int = Field(description="forks that no longer name it (each keeps its own copy)")
    blobs_deleted: int = Field(description="blobs no other session named, deleted")
    blobs_kept: int = Field(description="blobs another session still names, kept")


class EraseRoutes(RouteBase):
    async def erase(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        force = request.query_params.get("force", "false").lower() in ("1", "true", "yes")
        session = await self._owned(principal, public)
        try:
            report = await durable(erase_session, self._rt.journal, session.id, force=force)
        except SessionNotFoundError:
            raise session_not_found(public) from None
        except SessionBusyError as exc:
            raise ApiError(409, "session_busy", str(exc), error="SessionBusyError") from None
        reply = EraseReply(
            session_id=public,
            records=report.records,
            children=len(report.children),
            forks=len(report.forks),
            blobs_deleted=len(report.blobs_deleted),
            blobs_kept=len(report.blobs_kept),
        )
        return json_reply(reply)
