"""Several real workers on one queue, duplicate wakes everywhere (issue 4, item 2; DESIGN §1).

Queue messages are hints: RQ hands the same session's wakes to whichever worker is free, many
at once. The store decides: one lease holder at a time, so the journal never forks (each
(turn, round) is one model call, each tool task completes once, events stay gap-free) and
submissions run one at a time in admission order.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest
from rq_support import RqHarness, proc_wchan, wait_until

import fxdurable as fx
from tests.kit.story import done_text
from tests.kit.world import assert_invariants, assert_model_requests

pytestmark = pytest.mark.redis

STORY_TOOLS = ("read_state", "charge", "deploy")


def queue_state(h: RqHarness) -> tuple[int, list[str]]:
    """RQ's own view: the wakes queued, and the ids of those its workers have taken.

    Taken is RQ's intermediate queue and its started registry together. A worker's dequeue
    moves a job from the queue to the intermediate queue; only then does the worker log the
    job, mark itself busy and put the job in the started registry (the horse takes it out of
    the intermediate queue). Looking at the started registry alone, a job just dequeued is
    nowhere, so the queue looked drained; a SIGTERM to the still "idle" worker at that moment
    makes RQ raise StopRequested before it logs or runs the job, and the job is never counted
    (RQ fails it as stuck in the intermediate queue a minute later: a lost wake, which the
    store's reconciliation scan makes harmless)."""
    import redis
    import rq

    connection = redis.Redis.from_url(h.redis_url)
    try:
        queue = rq.Queue(h.queue_name, connection=connection)
        dequeued = [i.decode() for i in connection.lrange(queue.intermediate_queue_key, 0, -1)]
        started = list(queue.started_job_registry.get_job_ids())
        return queue.count, dequeued + [i for i in started if i not in dequeued]
    finally:
        connection.close()


def queue_drained(h: RqHarness) -> bool:
    """No wake queued and none taken (used only to know when to look)."""
    queued, started = queue_state(h)
    return queued == 0 and not started


def wait_drained(h: RqHarness, what: str) -> None:
    try:
        wait_until(lambda: queue_drained(h), 20, what)
    except AssertionError as exc:
        queued, started = queue_state(h)
        raise AssertionError(
            f"{exc}: {queued} queued, taken {started}\n{h.diagnostics()}"
        ) from None


def jobs_run_by(h: RqHarness, session: str, reason: str = "") -> list[int]:
    """How many wakes of ``session`` (for ``reason``, or any) each worker took from the
    queue, from RQ's "<queue>: <description> (<job id>)" line at each job's start."""
    line = f"{h.queue_name}: fxdurable wake {session} ({reason}"
    return [w.log().count(line) for w in h.workers]


@pytest.mark.parametrize("n_workers", [2, 3])
def test_workers_racing_on_one_session_never_fork_the_journal(
    rq_harness: RqHarness, n_workers: int
) -> None:
    """Five messages to one session in quick succession, each wake delivered three times, to
    two or three workers."""
    h = rq_harness
    h.start_workers(n_workers, env={"FXD_TEST_TOOL_S": "0.05"})
    items = [("s", f"story m{i}", f"req-{i}") for i in range(5)]
    ids = h.submit(items, extra_wakes=[2] * len(items))
    subs = h.wait_settled(ids, timeout=60)
    assert [s.status for s in subs] == ["completed"] * 5, (subs, h.diagnostics())
    assert [s.result_text for s in subs] == [done_text(f"m{i}") for i in range(5)]
    wait_drained(h, "the queue to drain")
    assert h.stop_workers() == [0] * n_workers, h.diagnostics()

    world = h.world()
    assert_invariants(world, [r for _s, _p, r in items])  # includes FIFO turn order
    assert_model_requests(world)  # each (turn, round) requested and recorded once
    # Each step recorded once and run once: no task ran twice, under any worker.
    assert len(world.tasks) == 5 * len(STORY_TOOLS)
    assert all(t.status == "completed" and t.runs == 1 for t in world.tasks), world.tasks
    assert Counter(eid for _t, eid, _r, _p in world.calls) == Counter(
        t.execution_id for t in world.tasks
    )
    # No turn needed a second attempt: nobody took a live lease over.
    assert all(len(world.attempts[s.id]) == 1 for s in subs)
    assert not world.events_of("attempt.interrupted")
    # Turns in admission order, each after the previous one settled.
    started = [e.turn_id for e in world.events_of("turn.started")]
    assert started == [s.id for s in sorted(subs, key=lambda s: s.seq)] == ids
    # The race was real: at least two workers took wakes of this one session.
    taken = jobs_run_by(h, "s")
    assert sum(taken) >= 15 and sum(1 for n in taken if n) >= 2, taken


def test_every_wake_delivered_two_or_three_times_repeats_no_effect(rq_harness: RqHarness) -> None:
    """Three sessions, two messages each, every wake enqueued two or three times, and more
    duplicates once everything rests: each effect happens once, and late duplicates write
    nothing at all."""
    h = rq_harness
    h.start_workers(2, env={"FXD_TEST_TOOL_S": "0.05"})
    items = [(f"s{k}", f"story {k}{n}", f"req-{k}{n}") for n in "ab" for k in range(3)]
    ids = h.submit(items, extra_wakes=[1, 2] * 3)
    subs = h.wait_settled(ids, timeout=60)
    assert [s.status for s in subs] == ["completed"] * 6, (subs, h.diagnostics())
    wait_drained(h, "the queue to drain")
    before = h.world()

    # Late duplicates, for sessions at rest: each wake is a no-op.
    from fxdurable.queues.rq import RqQueue

    queue = RqQueue(h.queue_url)
    try:
        for k in range(3):
            for _ in range(3):
                queue.enqueue_now(f"s{k}", reason="dup")
    finally:
        asyncio.run(queue.aclose())
    wait_drained(h, "the late duplicates to be taken")
    assert h.stop_workers() == [0, 0], h.diagnostics()

    world = h.world()
    assert_invariants(world, [r for _s, _p, r in items])
    assert_model_requests(world)
    assert world.events == before.events, "a duplicate wake for a session at rest wrote"
    assert world.calls == before.calls and world.effects == before.effects
    # One deploy and one charge per submission, each under its own execution id.
    deploys = [world.task("deploy", r).execution_id for _s, _p, r in items]
    charges = [world.task("charge", r).execution_id for _s, _p, r in items]
    assert sorted(world.effects_of("deploy")) == sorted(deploys)
    assert sorted(world.ledger) == sorted(charges)
    assert all(t.runs == 1 for t in world.tasks), world.tasks
    # Every wake (9 per session: 2-3 per message, 3 late) reached a worker.
    taken = [sum(jobs_run_by(h, f"s{k}")) for k in range(3)]
    assert all(n >= 8 for n in taken), taken


def test_no_wake_is_lost_between_the_last_check_and_the_release(rq_harness: RqHarness) -> None:
    """DESIGN §9, the lost wake-up: a message admitted while the lease holder is between its
    last look for work and its release has its wake dropped by the other worker (the lease
    looked held). The periodic scans are off here (only the startup one runs), so only the
    release's own re-check, in the same transaction, can save it.

    Each message is admitted the moment the previous one settles, which is when its worker is
    about to let go: some land before its last look (it runs them in the same job), some in
    the window (its release answers "more work" and enqueues a wake), some after the release."""
    h = rq_harness
    h.start_workers(2, scan_interval_s=3600)
    n = 20

    async def send() -> list[str]:
        ids = []
        async with fx.Runtime(h.agents(), store=h.store_url, queue=h.queue_url) as rt:
            handle = rt.session("s")
            for i in range(n):
                sub = await handle.submit(f"story w{i}", request_id=f"req-{i}")
                ids.append(sub.id)
                await handle.wait(sub.id, timeout=30, poll_s=0.0005)
        return ids

    ids = asyncio.run(send())
    subs = h.wait_settled(ids, timeout=30)
    assert [s.status for s in subs] == ["completed"] * n
    wait_drained(h, "the queue to drain")
    assert h.stop_workers() == [0, 0], h.diagnostics()
    world = h.world()
    assert_invariants(world, [f"req-{i}" for i in range(n)])
    assert_model_requests(world)
    assert sum(jobs_run_by(h, "s", "reconcile")) == 0, "a scan ran"
    more = sum(jobs_run_by(h, "s", "more work"))
    print(f"MEASURE wakes re-enqueued by a release that found more work: {more} of {n}")


def test_a_work_horse_forked_during_a_reconciliation_scan_does_not_hang(
    make_harness: Callable[..., RqHarness],
) -> None:
    """RQ forks a work horse per job while the worker's scan thread may be inside the store's C
    library (SQLite's allocator and open hold process-wide mutexes). A horse forked at that
    moment inherits the mutex locked, with no thread left to unlock it, and hangs in its first
    store call until RQ kills it (job timeout + 60 s): its wake, and every wake queued behind
    it on that worker, waits. This was the late-duplicate-wake flake of the race test above.

    The scan runs back to back here (every millisecond), so nearly every fork lands in one."""
    h = make_harness(job_timeout=10)
    worker = h.start_worker(scan_interval_s=0.001)
    from fxdurable.queues.rq import RqQueue

    wakes = 40
    queue = RqQueue(h.queue_url)
    try:
        for _ in range(wakes):
            queue.enqueue_now("nobody", reason="dup")
    finally:
        asyncio.run(queue.aclose())

    def done() -> bool:
        return worker.log().count("wake for unknown session nobody ignored") == wakes

    try:
        # Each wake is a fork and one read (well under a second even on a loaded machine); a
        # hung horse never finishes before RQ kills it, 70 s after its start.
        wait_until(done, 60, f"{wakes} wakes to be taken")
    except AssertionError as exc:
        stuck = {pid: proc_wchan(pid) for pid in worker.horses()}
        raise AssertionError(
            f"{exc}; horses alive (pid: kernel wait) {stuck}\n{h.diagnostics()}"
        ) from None
    assert h.stop_workers() == [0], h.diagnostics()
