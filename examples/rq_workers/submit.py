"""Admit a prompt for the workers, then follow its turn as they record it.

    python submit.py --store redis://127.0.0.1:6379/0 --queue rq://127.0.0.1:6379/0 "..."

With an ``rq://`` queue this process runs nothing: it admits the prompt durably, enqueues a
wake, and reads the events the workers (``fxdurable worker``) record, whichever worker runs
the turn, and however many of them die on the way.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from myagents import agents

import fxdurable as fx


def describe(event: fx.EventRecord) -> str | None:
    """One line for the events worth showing; None for the rest."""
    data = event.data
    if event.type == "attempt.started":
        return f"  attempt {data['number']} started on worker {data['worker']}"
    if event.type == "attempt.interrupted":
        return f"  attempt {data['number']} was interrupted (its worker died)"
    if event.type == "model.completed":
        called = data["tools"]
        tools = f" -> {', '.join(map(str, called))}" if isinstance(called, list) and called else ""
        return f"  model: {data['text']}{tools}" if data["text"] or tools else None
    if event.type == "tool.started":
        return f"  tool {data['tool']} running (run {data['run']}, {data['policy']})"
    if event.type.startswith("tool.") and event.type != "tool.step":
        return f"  tool {data['tool']} {event.type.removeprefix('tool.')}: {data['result']}"
    return None


async def main(args: argparse.Namespace) -> int:
    async with fx.Runtime(agents, store=args.store, queue=args.queue) as runtime:
        session = runtime.session(args.session)
        submission = await session.submit(args.prompt, request_id=args.request_id)
        print(f"admitted {submission.id} to session {args.session}", flush=True)
        cursor = submission.cursor - 1
        while True:
            # Settled first, then the events: the last read has every event up to the end.
            submission = await session.submission(submission.id) or submission
            for event in await session.events(after=cursor):
                cursor = event.seq
                if (line := describe(event)) is not None:
                    print(line, flush=True)
            if submission.settled:
                break
            await asyncio.sleep(0.2)
    if submission.error is not None:
        print(f"{submission.status}: {submission.error.code}: {submission.error.message}")
    else:
        print(f"{submission.status}: {submission.result}")
    return 0 if submission.status == fx.SubmissionStatus.COMPLETED else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt")
    parser.add_argument("--store", required=True, help="the workers' store URL")
    parser.add_argument("--queue", required=True, help="the workers' queue URL")
    parser.add_argument("--session", default="reports", help="the session (default reports)")
    parser.add_argument("--request-id", help="an idempotency key: a retry is the same submission")
    try:
        sys.exit(asyncio.run(main(parser.parse_args())))
    except fx.FxDurableError as exc:  # a configuration mistake: one line, not a traceback
        sys.exit(f"error: {exc}")
