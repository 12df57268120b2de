"""``handlers/app.py`` builds the app from the environment, as a deployment imports it."""

from __future__ import annotations

import asyncio
import importlib
import sys

import httpx
import pytest
from http_lines import lines_of

from fxdurable.errors import ConfigurationError

TOKEN = "handler-token-0123456789"


def _fresh_import():
    sys.modules.pop("handlers.app", None)
    return importlib.import_module("handlers.app")


def test_the_deployable_app_serves_with_tokens_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FXD_AGENTS", "fxdurable.cli.demo_agent:agents")
    monkeypatch.setenv("FXD_DEMO_DIR", str(tmp_path / "demo"))
    monkeypatch.setenv("FXD_STORE", f"sqlite:///{tmp_path}/handlers.db")
    monkeypatch.setenv("FXD_QUEUE", "local")
    monkeypatch.setenv("FXD_HTTP_TOKENS", f"ops={TOKEN}")
    module = _fresh_import()

    async def main() -> list[str]:
        app = module.app
        async with app.router.lifespan_context(app):  # starts (and closes) its runtime
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/sessions/x")).status_code == 401
                response = await client.post(
                    "/chat",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    json={"prompt": "Ship release 1.4 to production."},
                    timeout=20,
                )
                assert response.status_code == 200
                return [line["type"] for line in lines_of(response.text.splitlines())]

    types = asyncio.run(main())
    assert types[0] == "turn_start" and types[-1] == "turn_end"


def test_the_deployable_app_refuses_to_start_without_credentials(monkeypatch):
    monkeypatch.setenv("FXD_AGENTS", "fxdurable.cli.demo_agent:agents")
    for name in ("FXD_HTTP_TOKENS", "FXD_HTTP_TOKENS_FILE", "FXD_HTTP_DEV"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="no API tokens"):
        _fresh_import()
