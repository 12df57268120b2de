"""MCP through an adapter on a queue: the pydantic-ai agent whose tools are all a
streamable-HTTP MCP server's (``tests/adapters/test_adapter_mcp_tools.py``), run by real
``fxdurable worker`` processes on RQ with the Redis store (``pydai_rq_mcp_agents.py``). The
horse SIGKILLs itself right after the server's destructive ``deploy`` returned, before its
result was recorded; the surviving RQ parent recovers the session in a new horse: the deploy
happened once, the model is told its outcome is unknown and its blind repeat refused, the
idempotent note took effect once (deduplicated by the server on the ``_meta`` execution id),
``fxdurable check`` is clean, and a fresh worker answers a follow-up over the same server."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_support import RqHarness

from tests.mcp.mcp_support import free_port, start_http_server

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))

from test_adapter_mcp_tools import HERE as SERVER  # noqa: E402
from test_adapter_mcp_tools import build  # noqa: E402
from test_rq_pydantic_ai import LEASE_TTL_S, run_killed_horse  # noqa: E402

pytestmark = [pytest.mark.redis, pytest.mark.crash, pytest.mark.slow]

SPEC = "tool.after-execute:deploy"


@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
def test_a_horse_killed_after_an_mcp_deploy_through_pydantic_ai_is_recovered(
    make_harness: Callable[..., RqHarness],
) -> None:
    from fxdurable.tools.mcp_connection import close_connections

    h = make_harness(lease_ttl_s=LEASE_TTL_S)  # the server's world is the harness's
    port = free_port()
    server = start_http_server(
        h.world_dir, port, [str(SERVER), "serve", str(h.world_dir), "--http", str(port)]
    )
    env = {"FXD_TEST_MCP_HTTP": str(port), "FXD_TEST_ADAPTERS": str(ADAPTERS)}
    agents = (
        ADAPTERS / "pydai_rq_mcp_agents.py",
        lambda world: build("pydantic-ai", world, port),
        env,
    )
    try:
        run_killed_horse(h, "pydantic-ai", SPEC, 1, True, agents=agents)
    finally:
        close_connections()
        server.kill()
        server.wait()
