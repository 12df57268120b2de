"""Your own Starlette app, with fxdurable's HTTP API mounted under ``/agent`` behind your own
API keys, and a route of your own beside it.

    APP_API_KEYS="alice=<key>,bob=<key>" uvicorn app:app --port 8000

``authenticate`` is the one thing fxdurable asks of your auth: a request in, a principal (a
stable user id) or None out. Sessions belong to the principal that made them; everyone else
gets 404 for them, and a caller without a valid key gets 401, on every route.
"""

from __future__ import annotations

import contextlib
import hmac
import os
from collections.abc import AsyncIterator

import pydantic
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

import fxdurable as fx
from fxdurable.http import create_app

ORDERS = {"7": "shipped on Monday, arriving Thursday", "8": "waiting for stock"}


def api_keys_from_env() -> list[tuple[bytes, str]]:
    """``APP_API_KEYS``: ``principal=key`` pairs, comma-separated. Your own configuration:
    a secrets manager, a database of keys, an identity provider would do as well."""
    pairs = [p.strip() for p in os.environ.get("APP_API_KEYS", "").split(",") if p.strip()]
    keys = []
    for pair in pairs:
        principal, _, key = pair.partition("=")
        if not principal or len(key) < 16:
            raise SystemExit(f"APP_API_KEYS: expected principal=key with a 16+ char key: {pair!r}")
        keys.append((key.encode(), principal))
    if not keys:
        raise SystemExit('set APP_API_KEYS="alice=<key>,bob=<key>" (keys of 16+ characters)')
    return keys


API_KEYS = api_keys_from_env()


async def principal_for(request: Request) -> str | None:
    """The caller's principal: the owner of the key in ``X-API-Key`` (or in
    ``Authorization: Bearer``, which is what fxdurable's web console sends), else None."""
    given = request.headers.get("x-api-key", "")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if not given and scheme.lower() == "bearer":
        given = token.strip()
    found = None
    for key, principal in API_KEYS:  # every key compared, in constant time
        if hmac.compare_digest(key, given.encode()):
            found = principal
    return found


class Order(pydantic.BaseModel):
    order_id: str = pydantic.Field(description="the order number, e.g. 7")


@fx.tool(reuse=False)  # a read: safe to run again, and read afresh after a crash
def order_status(inp: Order, ctx: fx.ToolContext) -> str:
    """Look up where an order is."""
    return ORDERS.get(inp.order_id, f"no order {inp.order_id}")


support = fx.Agent(
    "support",
    model=os.environ.get("AGENT_MODEL", "openai/gpt-4o-mini"),
    instructions="You answer questions about orders. Look orders up with order_status.",
    tools=[order_status],
)

runtime = fx.Runtime([support], store="sqlite:///.fxd/app.db")

# manage_runtime=False: Starlette does not run a mounted app's lifespan, so this app starts
# and stops the runtime itself (below), once for everything it mounts.
agent_api = create_app(runtime, authenticate=principal_for, manage_runtime=False)


async def me(request: Request) -> JSONResponse:
    """A route of your own, behind the same keys."""
    principal = await principal_for(request)
    if principal is None:
        return JSONResponse({"code": "unauthorized", "message": "send X-API-Key"}, 401)
    return JSONResponse({"principal": principal, "agents": sorted(runtime.agents)})


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    # Starting the runtime resumes any turn a previous process left unfinished; stopping it
    # (uvicorn's SIGTERM, Ctrl-C) stops running turns at their next step boundary.
    async with runtime:
        yield


app = Starlette(
    routes=[Route("/me", me), Mount("/agent", app=agent_api)],
    lifespan=lifespan,
)
