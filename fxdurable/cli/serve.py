"""``fxdurable serve``: the HTTP API under uvicorn, on the embedded store by default."""

from __future__ import annotations

import importlib.util
import os
import sys

from fxdurable.errors import ConfigurationError

__all__ = ["DEMO_AGENTS", "run_serve"]

DEMO_AGENTS = "fxdurable.cli.demo_agent:agents"
# Open streams get this long to finish on SIGTERM; then the runtime stops its turns at their
# next step boundary (a continuation picks them up) and the clients reconnect from a cursor.
_GRACEFUL_S = 5


def run_serve(
    *,
    host: str,
    port: int,
    agents: str | None,
    store: str | None,
    queue: str | None,
    dev: bool | None,
    tokens_file: str | None,
    invocation_budget_s: float | None,
    verbose: bool,
) -> int:
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigurationError(
            f"fxdurable serve needs {' and '.join(missing)}: pip install 'fxdurable[http]'"
        )
    import uvicorn

    from fxdurable.http.env import app_from_env

    if agents is None and not os.environ.get("FXD_AGENTS"):
        agents = DEMO_AGENTS
        print(
            f"serving the demo agent ({DEMO_AGENTS}); choose yours with --agents", file=sys.stderr
        )
    app = app_from_env(
        dev=dev,
        tokens_file=tokens_file,
        agents=agents,
        store=store,
        queue=queue,
        invocation_budget_s=invocation_budget_s,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="debug" if verbose else "info",
        timeout_graceful_shutdown=_GRACEFUL_S,
        lifespan="on",
    )
    uvicorn.Server(config).run()
    return 0
