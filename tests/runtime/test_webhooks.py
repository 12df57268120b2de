"""Settlement webhooks (``Agent(webhook=)``, docs/webhooks.md) on the embedded runtime with
a real HTTP receiver: the signed body of each submission's end, a retry after a failure with
the same delivery id, abandonment after the last attempt, and the session at rest only once
nothing is owed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from fxrt_support import FAST, at_rest, check_invariants, event_types, fresh_store, read, run
from webhook_support import SECRET, Receiver, receiving

import fxdurable as fx
from fxdurable.errors import ConfigurationError
from fxdurable.stores.sqlite import SqliteStore


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as got:
        yield got


def agent(receiver: Receiver, **options: float) -> fx.Agent:
    hook = fx.Webhook(url=receiver.url, secret=SECRET, **options)  # type: ignore[arg-type]
    return fx.Agent("a", fx.ScriptedModel([fx.reply("all done")]), webhook=hook)


def test_a_completed_turn_is_posted_signed_and_the_session_rests(tmp_path, receiver) -> None:
    async def go():
        async with fx.Runtime([agent(receiver)], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s")
            sub = await s.wait((await s.submit("ship it")).id, timeout=10)
            await asyncio.to_thread(receiver.wait_for, 1)
            await check_invariants(rt, "s")  # idle, nothing owed
            return sub, event_types(rt, "s"), read(rt, lambda v: v.get_session("s"))

    sub, kinds, session = run(go())
    ((headers, body),) = receiver.received
    assert headers["x-fxdurable-delivery"] == sub.id
    assert headers["content-type"] == "application/json"
    sent = fx.verify_webhook(body, headers["x-fxdurable-signature"], SECRET)
    assert sent["type"] == "turn_end" and sent["outcome"] == "completed"
    assert (sent["session"], sent["submission"], sent["text"]) == ("s", sub.id, "all done")
    assert kinds[-1] == "webhook.delivered"
    assert session.webhooks == ()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_failed_attempt_is_retried_with_the_same_delivery_id(
    tmp_path, receiver, backend, request
) -> None:
    receiver.statuses[:] = [500, 200]
    if backend == "redis":
        from fxdurable.stores.redis import RedisStore

        store = RedisStore(request.getfixturevalue("redis_url"))
    else:
        store = fresh_store(tmp_path)

    async def go():
        hooked = agent(receiver, backoff_s=0.05)
        async with fx.Runtime([hooked], store=store, settings=FAST) as rt:
            s = rt.session("s")
            sub = await s.wait((await s.submit("ship it")).id, timeout=10)
            await asyncio.to_thread(receiver.wait_for, 2)
            await at_rest(rt, "s")
            await check_invariants(rt, "s")
            events = [e for e in read(rt, lambda v: list(v.events("s")))]
            return sub, events

    sub, events = run(go())
    assert [h["x-fxdurable-delivery"] for h, _ in receiver.received] == [sub.id, sub.id]
    delivered = events[-1]
    assert delivered.type == "webhook.delivered"
    assert delivered.data == {"submission": sub.id, "attempts": 2, "status": 200}


def test_after_its_last_attempt_a_webhook_is_abandoned(tmp_path, receiver) -> None:
    receiver.statuses[:] = [503]

    async def go():
        hooked = agent(receiver, attempts=2, backoff_s=0.05)
        async with fx.Runtime([hooked], store=fresh_store(tmp_path), settings=FAST) as rt:
            await rt.session("s").run("ship it", timeout=10)
            await asyncio.to_thread(receiver.wait_for, 2)
            await at_rest(rt, "s")
            await check_invariants(rt, "s")
            return read(rt, lambda v: list(v.events("s")))[-1]

    abandoned = run(go())
    assert abandoned.type == "webhook.abandoned"
    assert abandoned.data["attempts"] == 2
    assert abandoned.data["error"] == "HTTP 503"  # never the URL: it may carry a token
    assert len(receiver.received) == 2


def test_a_signature_that_does_not_match_is_refused() -> None:
    body = b'{"type":"turn_end"}'
    now = time.time()
    good = fx.verify_webhook
    from fxdurable.runtime.webhooks import sign_webhook

    header = sign_webhook(SECRET, body, now)
    assert good(body, header, SECRET) == {"type": "turn_end"}
    with pytest.raises(fx.WebhookSignatureError, match="does not match"):
        good(body + b" ", header, SECRET)
    with pytest.raises(fx.WebhookSignatureError, match="does not match"):
        good(body, header, "another-secret-of-16+")
    with pytest.raises(fx.WebhookSignatureError, match="replay"):
        good(body, sign_webhook(SECRET, body, now - 3600), SECRET)
    with pytest.raises(fx.WebhookSignatureError, match="malformed"):
        good(body, "v1=abc", SECRET)
    assert json.loads(body) == {"type": "turn_end"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "ftp://example.com/x"}, "http"),
        ({"secret": "short"}, "16 characters"),
        ({"attempts": 0}, "attempts"),
        ({"backoff_s": 0}, "backoff_s"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_a_bad_webhook_is_refused_when_the_agent_is_built(options, message) -> None:
    given = {"url": "https://example.com/hooks", "secret": SECRET, **options}
    with pytest.raises(ConfigurationError, match=message):
        fx.Webhook(**given)


def test_the_secret_is_not_in_the_agents_repr() -> None:
    hook = fx.Webhook(url="https://example.com/hooks", secret=SECRET)
    assert SECRET not in repr(hook)
    assert SECRET not in repr(fx.Agent("a", fx.ScriptedModel([]), webhook=hook))


CRASHING = """
import asyncio, sys
import fxdurable as fx
from fxdurable.stores.sqlite import SqliteStore

async def main():
    hook = fx.Webhook(url=sys.argv[2], secret=sys.argv[3])
    agent = fx.Agent("a", fx.ScriptedModel([fx.reply("all done")]), webhook=hook)
    async with fx.Runtime([agent], store=SqliteStore(sys.argv[1])) as rt:
        await rt.session("s").run("ship it", timeout=10)
        await asyncio.sleep(10)  # killed before this ends, once the receiver has answered

asyncio.run(main())
"""


@pytest.mark.crash
def test_a_worker_killed_after_the_receiver_answered_sends_it_again(tmp_path, receiver) -> None:
    """SIGKILL between the receiver's 2xx and its record: the webhook is still owed, the
    next worker sends it again with the same delivery id, and it is recorded once."""
    url = f"sqlite:///{tmp_path}/fx.db"
    env = {k: v for k, v in os.environ.items() if k != "FXD_CRASH_AT"}
    env["FXD_CRASH_AT"] = "webhook.after-send"
    died = subprocess.run(
        [sys.executable, "-c", CRASHING, url, receiver.url, SECRET],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert len(receiver.received) == 1

    async def go():
        store = SqliteStore(url)
        session = store.read(lambda v: v.get_session("s"))
        assert session is not None and len(session.webhooks) == 1  # still owed
        async with fx.Runtime([agent(receiver)], store=store, settings=FAST) as rt:
            await asyncio.to_thread(receiver.wait_for, 2)
            await at_rest(rt, "s")
            await check_invariants(rt, "s")
            return event_types(rt, "s")

    kinds = run(go())
    first, second = (h["x-fxdurable-delivery"] for h, _ in receiver.received)
    assert first == second
    assert kinds.count("webhook.delivered") == 1
