"""A turn that RQ runs in two jobs (the first stopped at a boundary, the second its
continuation) is one trace: the traceparent rides in each job's kwargs. The jobs run in this
process (rq's SimpleWorker) so their spans reach the in-memory exporter."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from obs_agents import ANSWER, PROMPT, agent
from opentelemetry import trace

import fxdurable as fx
from fxdurable.workers import rq_job

pytestmark = pytest.mark.redis


def test_a_turn_continued_by_a_second_rq_job_is_one_trace(
    tmp_path, redis_server, spans, monkeypatch
):
    import redis
    import rq

    store = f"sqlite:///{tmp_path}/x.db"
    queue_url = redis_server.replace("redis://", "rq://") + f"/0?queue=obs-{uuid.uuid4().hex}"
    for name, value in (
        ("FXD_STORE", store),
        ("FXD_QUEUE", queue_url),
        ("FXD_AGENTS", "obs_agents:agents"),
    ):
        monkeypatch.setenv(name, value)

    async def submit() -> tuple[str, trace.Span]:
        async with fx.Runtime([agent()], store=store, queue=queue_url) as rt:
            with trace.get_tracer("app").start_as_current_span("app.request") as app:
                sub = await rt.session("s1").submit(PROMPT)
        return sub.id, app

    sub_id, app = asyncio.run(submit())
    connection = redis.Redis.from_url(redis_server + "/0")
    try:
        queue = rq.Queue(queue_url.rsplit("queue=", 1)[1], connection=connection)
        assert queue.jobs[0].kwargs == {"trace_parent": _traceparent(spans.one("fxdurable.turn"))}
        worker = rq.SimpleWorker([queue], connection=connection)
        monkeypatch.setattr(rq_job, "_early_stop", "SIGUSR1")  # the first job stops at once
        worker.work(burst=True, max_jobs=1)
        monkeypatch.setattr(rq_job, "_early_stop", None)
        worker.work(burst=True)
    finally:
        connection.close()

    attempts = sorted(spans.named("fxdurable.attempt"), key=lambda s: s.start_time)
    assert [a.attributes["fxdurable.attempt.outcome"] for a in attempts] == [
        "suspended",
        "completed",
    ]
    turn = spans.one("fxdurable.turn")
    assert all(a.parent.span_id == turn.context.span_id for a in attempts)
    assert {s.context.trace_id for s in spans.all()} == {app.get_span_context().trace_id}
    assert len(spans.named("fxdurable.model_call")) == 2
    assert attempts[1].attributes["fxdurable.submission.id"] == sub_id
    assert ANSWER not in str([dict(s.attributes or {}) for s in spans.all()])


def _traceparent(span) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
