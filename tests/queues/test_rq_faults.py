"""The RQ queue's one error boundary (``fxdurable.queues.rq._REDIS_ERRORS``): what redis-py
raises comes out as the project's errors, naming the address and never the password, and a
submission whose wake Redis did not take says so (WakeNotSentError) with a project error as
its cause, never a redis-py one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fxdurable as fx
from fxdurable.errors import (
    ConfigurationError,
    FxDurableError,
    QueueUnavailableError,
    WakeNotSentError,
)
from fxdurable.queues.rq import RqQueue
from fxdurable.testing.net import free_port

pytestmark = pytest.mark.redis

SECRET = "s3cret-pw"


def _rq_url(base: str, *, password: str | None = None) -> str:
    hostport = base.removeprefix("redis://").rstrip("/")
    auth = f":{password}@" if password else ""
    return f"rq://{auth}{hostport}/0?queue=faults"


def test_a_redis_that_cannot_be_reached_is_unavailable_and_a_submit_says_wake_not_sent(
    tmp_path: Path,
) -> None:
    pytest.importorskip("rq")
    port = free_port()  # nothing listens there
    url = _rq_url(f"redis://127.0.0.1:{port}", password=SECRET)
    queue = RqQueue(url)
    with pytest.raises(QueueUnavailableError) as info:
        queue.enqueue_now("s1", reason="submitted")
    assert f"cannot reach the RQ Redis at 127.0.0.1:{port}" in str(info.value)
    assert SECRET not in str(info.value) and SECRET not in info.value.url
    assert info.value.__suppress_context__  # no redis-py traceback chained on

    agent = fx.Agent("eng", fx.ScriptedModel(lambda r: fx.reply("ok")))

    async def main() -> BaseException:
        store = f"sqlite:///{tmp_path}/rq-faults.db"
        async with fx.Runtime([agent], store=store, queue=url) as rt:
            with pytest.raises(WakeNotSentError) as sent:
                await rt.session("s1", agent="eng").submit("hello")
            return sent.value

    error = asyncio.run(main())
    assert isinstance(error.__cause__, FxDurableError), repr(error.__cause__)
    assert "cannot reach the RQ Redis" in str(error) and SECRET not in str(error)


def test_refusals_are_mapped_by_kind(redis_factory: Callable[..., Any]) -> None:
    pytest.importorskip("rq")
    import redis

    server = redis_factory()
    client = redis.Redis.from_url(server.url)
    try:
        # Out of memory (noeviction): the queue is away for now, the call may succeed later.
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")
        with pytest.raises(QueueUnavailableError, match="out of memory"):
            RqQueue(_rq_url(server.url)).enqueue_now("s1", reason="submitted")
        client.config_set("maxmemory", "0")
        RqQueue(_rq_url(server.url)).enqueue_now("s1", reason="submitted")  # and it does
        # A wrong password: configuration, whether pinged at start or sending a wake.
        client.config_set("requirepass", SECRET)
        client = redis.Redis.from_url(server.url, password=SECRET)
        wrong = RqQueue(_rq_url(server.url, password="not-it"))
        for call in (wrong.check, lambda: wrong.enqueue_now("s1", reason="submitted")):
            with pytest.raises(ConfigurationError, match="refused the credentials") as info:
                call()
            assert "not-it" not in str(info.value) and SECRET not in str(info.value)
    finally:
        client.close()
