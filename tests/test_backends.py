"""fxdurable.backends: the one place that opens store and queue URLs (the store URLs
themselves are covered by the store contract suite)."""

from __future__ import annotations

import asyncio

import pytest

from fxdurable.backends import open_queue, open_rq_queue
from fxdurable.core.queue import InProcessQueue, WakeQueue
from fxdurable.errors import ConfigurationError


def test_local_is_the_queue_this_process_consumes() -> None:
    async def roundtrip() -> tuple[str, str, str | None]:
        queue: WakeQueue = open_queue("local")
        assert isinstance(queue, InProcessQueue) and queue.url == "local"
        await queue.enqueue("s1", reason="test")
        return await queue.get()

    assert asyncio.run(roundtrip()) == ("s1", "test", None)


def test_an_rq_queue_is_consumed_elsewhere() -> None:
    queue = open_queue("rq://127.0.0.1:1/0?queue=q")  # opening connects to nothing yet
    assert not isinstance(queue, InProcessQueue)
    assert queue.url == "rq://127.0.0.1:1/0?queue=q"


@pytest.mark.parametrize("url", ["sqs:queue", "redis://127.0.0.1:6379/0", "locale"])
def test_an_unknown_queue_url_names_the_accepted_ones(url: str) -> None:
    with pytest.raises(
        ConfigurationError, match=r"expected 'local', rq://.*, sqs://.* or postgresql://"
    ):
        open_queue(url)


@pytest.mark.parametrize("url", ["local", "redis://127.0.0.1:6379/0", "sqs://q?region=us-east-1"])
def test_rq_workers_refuse_a_queue_that_is_not_rq(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"need an rq://\.\.\. queue URL"):
        open_rq_queue(url)
