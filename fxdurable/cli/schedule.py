"""``fxdurable schedule``: submit a prompt to a session at a time or on a cron expression
(:mod:`fxdurable.runtime.schedule`), from a process of its own, onto the workers' store and
queue. Each fire's request id is derived from the schedule and the fire time, so a fire
retried by a restarted scheduler is one submission. ``--next N`` prints the next fire times
and touches no store."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

__all__ = ["add_parsers", "run"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("schedule", help="submit a prompt at a time or on a cron expression")
    cmd.add_argument("session", help="the session to submit to")
    cmd.add_argument("prompt", help="the prompt each fire submits")
    when = cmd.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="once, at this ISO 8601 time (UTC unless it says)")
    when.add_argument("--every", help='a 5-field cron expression in UTC, e.g. "0 9 * * 1-5"')
    cmd.add_argument("--agent", default="agent", help="the session's agent (default: agent)")
    cmd.add_argument("--store", default=os.environ.get("FXD_STORE"), help="store URL")
    cmd.add_argument("--queue", default=os.environ.get("FXD_QUEUE"), help="queue URL")
    cmd.add_argument("--next", type=int, metavar="N", help="print the next N fire times; exit")
    cmd.add_argument("--after", help="with --next: count from this ISO 8601 time, not now")


def _epoch(text: str) -> float:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from fxdurable.backends import DEFAULT_QUEUE, DEFAULT_STORE, open_queue, open_store
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal
    from fxdurable.errors import ConfigurationError
    from fxdurable.runtime.schedule import Cron, Schedule, fire_request_id, run_schedule

    try:
        at = None if args.at is None else _epoch(args.at)
        after = None if args.after is None else _epoch(args.after)
    except ValueError as exc:
        raise ConfigurationError(f"not an ISO 8601 time: {exc}") from None
    plan = Schedule(
        args.session,
        args.prompt,
        at=at,
        every=None if args.every is None else Cron.parse(args.every),
    )
    clock = SystemClock()
    if args.next is not None:
        t: float | None = clock.now() if after is None else after
        print(f"schedule {plan.id}")
        for _ in range(args.next):
            t = plan.next_fire(t) if t is not None else None
            if t is None:
                break
            print(f"{_iso(t)} {fire_request_id(plan.id, t)}")
        return 0
    store = open_store(args.store or DEFAULT_STORE)
    journal = Journal(store, clock, RandomIds())

    async def scheduler() -> None:
        queue = open_queue(args.queue or DEFAULT_QUEUE)

        async def submit(session: str, prompt: str, request_id: str) -> None:
            admission = await asyncio.to_thread(
                journal.admit, session, agent=args.agent, prompt=prompt, request_id=request_id
            )
            await queue.enqueue(session, reason="schedule")
            was = "submitted" if admission.created else "already submitted"
            print(f"fired {request_id}: {admission.submission.id} {was}", flush=True)

        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(run_schedule(plan, submit, clock=clock))
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)  # until stopped: exit 0
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            await queue.aclose()

    try:
        asyncio.run(scheduler())
    finally:
        store.close()
    return 0
