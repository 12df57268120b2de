"""Helpers for the end-to-end provider tests (a plain module; tests/models is on sys.path).

A real :class:`fxdurable.Runtime` runs an agent whose model is a model *string*
(``"openai/<model>"``, ``"anthropic/<model>"``) resolved from the environment, talking HTTP to a
:class:`ScriptedModelServer`: the real httpx client, SSE parser and error mapping all run.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import fxdurable as fx
from fxdurable.core.records import EventRecord
from fxdurable.runtime.models import aclose_clients
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing.model_server import ScriptedModelServer

T = TypeVar("T")

PROVIDERS = ("openai", "anthropic")
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_ENV = {"openai": "FXD_OPENAI_BASE_URL", "anthropic": "FXD_ANTHROPIC_BASE_URL"}


def endpoint_name(server: ScriptedModelServer) -> str:
    """How error messages name the test server: its host and port (it is not the provider's
    own endpoint, so messages do not say "OpenAI" or "Anthropic")."""
    return server.url.removeprefix("http://")


# The key the leak tests look for: distinctive, so that any occurrence is certainly a leak.
LEAKY_KEY = "sk-live-DO-NOT-LEAK-9f8e7d"

# Fast timings, as the runtime tests use: heartbeats every 50 ms, a scan 5 times a second.
FAST = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)

_stores: list[SqliteStore] = []


def run(coro: Awaitable[T], timeout: float = 10.0) -> T:
    """Run ``coro`` in a fresh loop with a timeout; the loop's shared HTTP clients are closed
    before it ends, and stores from :func:`fresh_store` after every thread is done with them
    (closing a SQLite connection under a journal call still running in a thread crashes)."""

    async def bounded() -> T:
        try:
            async with asyncio.timeout(timeout):
                return await coro
        finally:
            await aclose_clients()

    try:
        return asyncio.run(bounded())
    finally:
        while _stores:
            _stores.pop().close()


def db_path(tmp_path: Path, name: str = "fx.db") -> Path:
    return tmp_path / name


def fresh_store(tmp_path: Path, name: str = "fx.db") -> SqliteStore:
    """A store for a Runtime (which does not close a store object it was given); closed by
    :func:`run` after the loop has ended."""
    store = SqliteStore(f"sqlite:///{db_path(tmp_path, name)}?synchronous=NORMAL")
    _stores.append(store)
    return store


def point_at(
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    server: ScriptedModelServer,
    *,
    key: str | None = None,
) -> str:
    """Set the provider's base-URL variable to ``server`` and its key variable to ``key``
    (unset when None; the other provider's key is always unset, so a real key in the
    environment never reaches a test server). Returns the model string for the provider."""
    url = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    monkeypatch.setenv(BASE_URL_ENV[provider], url)
    for env in KEY_ENV.values():
        monkeypatch.delenv(env, raising=False)
    if key is not None:
        monkeypatch.setenv(KEY_ENV[provider], key)
    return f"{provider}/scripted-e2e"


class Sleeps:
    """An injected ``sleep`` that records the delays and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def runtime(
    tmp_path: Path, agents: list[fx.Agent], sleeps: Sleeps | None = None, **kw: Any
) -> fx.Runtime:
    return fx.Runtime(
        agents,
        store=kw.pop("store", None) or fresh_store(tmp_path),
        settings=FAST,
        sleep=sleeps or Sleeps(),
        rng=random.Random(7),
        **kw,
    )


def of_type(events: list[EventRecord], kind: str) -> list[EventRecord]:
    return [e for e in events if e.type == kind]


def db_files(tmp_path: Path, name: str = "fx.db") -> Iterator[Path]:
    """The database file and its SQLite companions (-wal, -shm, -journal) that exist."""
    return (p for p in sorted(tmp_path.iterdir()) if p.name.startswith(name))
