"""The coding agent served to a browser tab: ``make coding-ui``, that is

    fxdurable serve --dev --demo --agents examples.coding_agent.web:agents

run from the repository's root. The server admits and streams; the demo's worker process runs
the turns (``POST /demo/crash`` SIGKILLs it). Each session works in its own copy of
``project/`` under ``$FXD_CODING_DIR/workspace`` (default ``.fxd-coding``), made at its first
tool call; its plan mode is in ``$FXD_CODING_DIR/settings.db``, its "don't ask again" grants in
the session's state in the store (:mod:`.grants`).

:func:`agents` is the coder with the page's tools and permission hook; :func:`demo_routes` are
the page's own routes, which demo mode mounts beside the API (``/coding/...``; the UI contract
in docs/coding-agent.md lists them with their bodies).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pydantic
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.core.codec import JsonObject
from fxdurable.core.session_state import StateWrites
from fxdurable.errors import NoPendingQuestionError, SessionNotFoundError, WorkspaceError
from fxdurable.http.problems import ApiError, session_not_found
from fxdurable.http.route_base import session_id_param
from fxdurable.http.scoping import session_key
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.runtime import Runtime
from fxdurable.tools.directory_workspace import DirectoryWorkspace, safe_name
from fxdurable.tools.fsfiles import read_regular, regular_files
from fxdurable.tools.paths import confine

from .agent import PROJECT, coder, model_from_env
from .grants import grant, granted, revoke
from .policy import coding_policy
from .settings import SessionSettings

__all__ = ["agents", "coding_dir", "demo_routes", "settings", "workspace"]

Principal = Callable[[Request], Awaitable[str]]
# The scripted model streams its replies a few characters at a time, at this pace per delta,
# so a person sees the text arrive (a real model is as fast as it is).
SCRIPTED_DELTA_S = 0.01
# Left out of the files panel: what running the tests leaves behind, not the agent's work.
_NOT_SHOWN = ("__pycache__",)


def coding_dir() -> Path:
    return Path(os.environ.get("FXD_CODING_DIR", ".fxd-coding"))


def workspace() -> DirectoryWorkspace:
    return fxt.directory(coding_dir() / "workspace", template=PROJECT)


def settings() -> SessionSettings:
    return SessionSettings(coding_dir() / "settings.db")


def agents(model: Model | None = None) -> list[fx.Agent]:
    """The page's coder: with ``model``, else the environment's real model, else the scripted
    policy in process."""
    _python_first_on_path()
    if model is None:
        chosen = model_from_env()
        model = (
            chosen[0]
            if chosen
            else fx.ScriptedModel(coding_policy, name="scripted/coder", delay_s=SCRIPTED_DELTA_S)
        )
    return [coder(workspace(), model, settings())]


def _python_first_on_path() -> None:
    """``python3`` in the agent's shell is this interpreter (the project needs only the
    stdlib; the shell's environment is a copy of this process's, credentials removed)."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir


# -- the page's routes -------------------------------------------------------------------------


class PlanModeRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    on: bool


_TOOL_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(_TOOL_PATTERN)
GrantUpdate = Callable[[JsonObject], StateWrites]


class AllowRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    tool: str = pydantic.Field(pattern=_TOOL_PATTERN)


def demo_routes(runtime: Runtime, principal: Principal) -> list[Route]:
    """``/coding/sessions/{id}/...``: the files panel, the settings, plan mode and the
    "don't ask again" grants. Authenticated as every route; a session is the caller's own
    (its store key is made from the caller's principal, as the API's routes make it)."""
    routes = _CodingRoutes(runtime, principal, workspace(), settings())
    base = "/coding/sessions/{session_id}"
    return [
        Route(f"{base}/files", routes.files, methods=["GET"]),
        Route(f"{base}/files/{{path:path}}", routes.file, methods=["GET"]),
        Route(f"{base}/settings", routes.settings, methods=["GET"]),
        Route(f"{base}/plan-mode", routes.plan_mode, methods=["PUT"]),
        Route(f"{base}/allowed-tools", routes.allow, methods=["POST"]),
        Route(f"{base}/allowed-tools/{{tool}}", routes.revoke, methods=["DELETE"]),
    ]


class _CodingRoutes:
    def __init__(
        self,
        runtime: Runtime,
        principal: Principal,
        workspace: DirectoryWorkspace,
        settings: SessionSettings,
    ) -> None:
        self._rt = runtime
        self._principal = principal
        self._workspace = workspace
        self._settings = settings

    async def _key(self, request: Request) -> tuple[str, str]:
        """The caller's public session id and its store key."""
        principal = await self._principal(request)
        public = session_id_param(request.path_params["session_id"])
        return public, session_key(principal, public)

    def _where(self, key: str) -> Path:
        """The session's files: its directory once made, the project's before."""
        mine = self._workspace.root / safe_name(key)
        return mine if mine.is_dir() else PROJECT

    async def files(self, request: Request) -> Response:
        public, key = await self._key(request)
        return JSONResponse({"sessionId": public, **await asyncio.to_thread(self._files, key)})

    def _files(self, key: str) -> dict[str, Any]:
        where = self._where(key)
        template = _listing(PROJECT)
        listed = _listing(where)
        files = [
            {"path": path, "size": size, "status": _status(where, path, template)}
            for path, size in listed.items()
        ]
        return {
            "workspace": "directory",
            "files": files,
            "deleted": sorted(set(template) - set(listed)),
        }

    async def file(self, request: Request) -> Response:
        public, key = await self._key(request)
        try:
            path = confine(request.path_params["path"])
            content = await asyncio.to_thread(read_regular, self._where(key), path)
        except WorkspaceError as exc:
            raise ApiError(404, "no_such_file", str(exc)) from None
        original = await asyncio.to_thread(_read_or_none, PROJECT, path)
        status = "added" if original is None else "unchanged" if original == content else "modified"
        return JSONResponse(
            {
                "sessionId": public,
                "path": path,
                "content": content.decode("utf-8", "replace"),
                "original": None if original is None else original.decode("utf-8", "replace"),
                "status": status,
            }
        )

    async def _settings_reply(self, public: str, key: str, **extra: Any) -> JSONResponse:
        current = await asyncio.to_thread(self._settings.of, key)
        record = await self._rt.session(key).record()
        return JSONResponse(
            {
                "sessionId": public,
                "planMode": current.plan_mode,
                "allowedTools": list(granted(record.state if record is not None else {})),
                **extra,
            }
        )

    async def _update_grants(self, public: str, key: str, update: GrantUpdate) -> None:
        """Record a grant or a revocation in the session's state: a journal transition."""
        try:
            await durable(self._rt.journal.update_state, key, update)
        except SessionNotFoundError:
            raise session_not_found(public) from None

    async def settings(self, request: Request) -> Response:
        return await self._settings_reply(*await self._key(request))

    async def plan_mode(self, request: Request) -> Response:
        public, key = await self._key(request)
        body = _parse(PlanModeRequest, await request.body())
        await asyncio.to_thread(self._settings.set_plan_mode, key, body.on)
        return await self._settings_reply(public, key)

    async def allow(self, request: Request) -> Response:
        """Grant the tool for the rest of the session and answer the question about a call
        of it that waits now, if any: "Yes, and don't ask again"."""
        public, key = await self._key(request)
        body = _parse(AllowRequest, await request.body())
        await self._update_grants(public, key, grant(body.tool))
        session = self._rt.session(key)
        question = await session.question()
        cursor: int | None = None
        if question is not None and question.tool == body.tool:
            try:
                await session.answer(fx.allow())
            except NoPendingQuestionError:
                pass  # answered meanwhile (another tab): the grant stands all the same
            else:
                record = await session.record()
                cursor = None if record is None else record.next_event_seq - 1
        return await self._settings_reply(public, key, answered=cursor is not None, cursor=cursor)

    async def revoke(self, request: Request) -> Response:
        public, key = await self._key(request)
        tool = request.path_params["tool"]
        if not _TOOL_NAME.fullmatch(tool):
            raise ApiError(422, "invalid_tool", f"not a tool name: {tool[:80]!r}")
        await self._update_grants(public, key, revoke(tool))
        return await self._settings_reply(public, key)


def _parse(model: type[pydantic.BaseModel], raw: bytes) -> Any:
    try:
        return model.model_validate_json(raw or b"{}")
    except pydantic.ValidationError as exc:
        raise ApiError(422, "invalid_body", exc.errors()[0]["msg"]) from None


def _listing(where: Path) -> dict[str, int]:
    return {
        path: (where / path).stat().st_size
        for path in regular_files(where)
        if not any(part in _NOT_SHOWN for part in path.split("/"))
    }


def _read_or_none(where: Path, path: str) -> bytes | None:
    try:
        return read_regular(where, path)
    except WorkspaceError:
        return None


def _status(where: Path, path: str, template: dict[str, int]) -> str:
    if path not in template:
        return "added"
    if where == PROJECT:
        return "unchanged"
    same = _read_or_none(where, path) == _read_or_none(PROJECT, path)
    return "unchanged" if same else "modified"
