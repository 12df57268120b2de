"""Parallel tool batches: which calls of one model response run together, and running them.

A *batch* is a run of consecutive calls of the latest response (by index) whose replay policy
allows re-running them after a crash (``safe``, ``idempotent``), at most
``Agent.max_parallel_tools`` of them. An ``unsafe`` call is never in a batch: the calls before
it finish first, it runs alone, and the calls after it start after it has settled, so the
model's order of effects is kept where it could matter. A subagent call (``fx.subagent``) is
``idempotent`` and joins a batch like any other: the children of one response run
concurrently, each driven inline in the parent's process by its own call's task, through the
worker's wake handling (their own leases and heartbeats; :mod:`fxdurable.runtime.children`).
Nothing of a child's run goes through the parent's :class:`TurnCrossings` (the child's
commits are its own session's), so one child waiting on its store never holds the other back.

Every call of a batch is an ordinary call: its own hook, execution (own timeout, own progress
pump, own cancellation) and result. Only the executions overlap, and the commits are shared:
the batch's intents are one commit once every hook has passed, and results that arrive together
are one commit (:class:`ResultGroup`): a result that finds no commit in progress starts one
with whatever else has arrived by then; results arriving meanwhile make the next. An intent is
still durable before its call runs, and every result before the next model request. The
``before_tool`` hooks run one at a time, in the order the model asked, and no call of the batch
records its intent before the last hook has decided (:class:`HookGate`): a hook that asks a
person (``fx.ask``) stops the batch with none of its calls started, so the turn waits with
nothing running, as it would for a call run alone. The hooks that had allowed their calls are
asked again when the turn resumes (a hook runs before an intent, and may run more than once). The
commits of one turn are serialised (:class:`TurnCrossings`): the session's version and event
sequence are written by one transition at a time, so events stay gap-free and the driver's
in-memory turn state is updated by one thread at a time, on every store.

Recovery needs nothing of its own: what a crash leaves is a round in which some calls are
settled (their results are served from the record, never re-run), some ``running`` (each
recovered by its own policy: safe and idempotent calls re-run, and no unsafe call can be
running inside a batch) and some ``pending`` (run normally). :func:`parallel_batch` skips the
settled ones, so a recovered batch is the unsettled rest of the one that crashed. The model
reads the results by call index (the order it asked), whatever order they finished in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, ParamSpec, TypeVar

from fxdurable.core.records import ToolTaskRecord
from fxdurable.core.states import is_terminal
from fxdurable.errors import Suspend
from fxdurable.runtime.crossing import durable

__all__ = [
    "PARALLEL_POLICIES",
    "HookGate",
    "ResultGroup",
    "TurnCrossings",
    "parallel_batch",
    "run_batch",
]

P = ParamSpec("P")
R = TypeVar("R")
ItemT = TypeVar("ItemT")  # an item of a group

# The policies whose calls may overlap: a crash with several of them running leaves calls
# that recovery simply runs again (DESIGN §3.5), never an unknown outcome.
PARALLEL_POLICIES: frozenset[str] = frozenset({"safe", "idempotent"})


def parallel_batch(round_tasks: Sequence[ToolTaskRecord], *, limit: int) -> list[ToolTaskRecord]:
    """The calls to run together next: the first unsettled call of the round and the unsettled
    calls after it while their policies allow overlap (settled ones in between are skipped:
    their results stand). A single call when the first is unsafe or ``limit`` is 1; empty
    when every call has settled."""
    batch: list[ToolTaskRecord] = []
    for task in sorted(round_tasks, key=lambda t: t.index):
        if is_terminal(task.status):
            continue
        if task.policy not in PARALLEL_POLICIES:
            return batch or [task]
        batch.append(task)
        if len(batch) == limit:
            break
    return batch


class TurnCrossings:
    """The journal crossings of one turn, one at a time.

    ``asyncio.to_thread`` would otherwise run the intent and result commits of a batch's
    calls in several threads at once: each store would re-run the losers of the session
    version race (or serialise them itself), and the driver's turn state, which each commit
    updates from its worker thread, would be written concurrently. Waiting on the loop (an
    ``asyncio.Lock``, not a thread lock) keeps the executor's threads free for sync tools.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def __call__(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        async with self._lock:
            return await durable(fn, *args, **kwargs)


class ResultGroup(Generic[ItemT, R]):
    """Group commit of a batch's results, on the loop: ``submit(item)`` returns what
    ``commit(items)`` (run through the turn's crossings, one list in, one result per item
    out, in order) made of it. The first item starts a commit on the loop's next turn, so
    every call that finished in the same turn of the loop joins it; items submitted while
    it is in flight form the next. If a commit raises, each of its items raises that."""

    def __init__(self, cross: TurnCrossings, commit: Callable[[list[ItemT]], list[R]]) -> None:
        self._cross = cross
        self._commit = commit
        self._queue: list[tuple[ItemT, asyncio.Future[R]]] = []
        self._draining: asyncio.Future[None] | None = None

    async def submit(self, item: ItemT) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            group, self._queue = self._queue, []
            try:
                made = await self._cross(self._commit, [item for item, _ in group])
            except BaseException as exc:
                for _, future in group:
                    if future.done():  # its caller stopped waiting
                        continue
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    for _, queued in self._queue:  # nothing more commits on this loop
                        queued.cancel()
                    raise
                continue
            for (_, future), result in zip(group, made, strict=True):
                if not future.done():
                    future.set_result(result)


class HookGate:
    """Where a batch's calls wait, between their hook and their intent, for every other call
    of the batch to have passed its own hook (or to have settled without running).

    The batch's runner launches a call once the call before it has passed: the hooks run one
    at a time, in order."""

    def __init__(self, task_ids: Sequence[str]) -> None:
        self._passed = {task_id: asyncio.Event() for task_id in task_ids}
        self._all_passed = asyncio.Event()

    def passed(self, task_id: str) -> bool:
        """``task_id`` is past its hook: at the gate, settled, or not run at all. True if
        that opened the gate."""
        self._passed[task_id].set()
        if self._all_passed.is_set() or not all(e.is_set() for e in self._passed.values()):
            return False
        self._all_passed.set()
        return True

    async def wait_passed(self, task_id: str) -> None:
        await self._passed[task_id].wait()

    async def arrive(self, task_id: str) -> None:
        """Its hook allowed the call: wait for the other calls' hooks."""
        if self.passed(task_id):
            # The call that opens the gate would go on without yielding; one yield lets the
            # calls waiting here, woken in asked order, reach the turn's crossings before it,
            # so the intents are recorded in asked order.
            await asyncio.sleep(0)
        await self._all_passed.wait()


async def run_batch(
    calls: Sequence[tuple[str, Callable[[], Awaitable[object]]]], gate: HookGate
) -> None:
    """Run the ``(task id, call)`` pairs concurrently until each has settled its call, each
    launched once the one before it has passed ``gate``.

    A call's tool failing is its own recorded result, not an exception here. An exception out
    of a call is the turn's (a lost lease, a store down): the other calls are cancelled (their
    tasks are left ``running`` for recovery, as a crash would) and the first exception, in
    call order, is raised. A :class:`Suspend` (a hook stopping the turn) lets the other calls
    finish first: their results are recorded, not redone.
    """

    async def launched(task_id: str, call: Callable[[], Awaitable[object]]) -> object:
        try:
            return await call()
        finally:
            gate.passed(task_id)  # settled or failed without reaching the gate

    tasks: list[asyncio.Future[object]] = []
    try:
        for task_id, call in calls:
            tasks.append(asyncio.ensure_future(launched(task_id, call)))
            await gate.wait_passed(task_id)
        pending: set[asyncio.Future[object]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            failed = [t for t in done if not t.cancelled() and t.exception() is not None]
            if any(not isinstance(t.exception(), Suspend) for t in failed):
                break
    finally:
        for task in tasks:
            task.cancel()  # a no-op for the finished ones
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task.cancelled():
            continue
        exc = task.exception()
        if exc is not None:
            raise exc
