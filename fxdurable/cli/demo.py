"""``fxdurable demo``: the durable-turn story on the embedded store, in the current directory.

First run: tests, then an unsafe deploy. Crash it with ``--crash-at tool.after-execute:deploy``
and run it again: the recovered turn says the outcome is unknown, inspects production, and
does not deploy twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from fxdurable.cli.demo_agent import FOLLOW_UP, PROMPT, engineer, policy
from fxdurable.cli.render import Style, describe
from fxdurable.core.crash import CRASH_POINTS
from fxdurable.core.states import SubmissionStatus
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.runtime import Runtime, SessionHandle
from fxdurable.runtime.submission import Submission
from fxdurable.runtime.worker import WorkerSettings

__all__ = ["run_demo"]

SESSION = "engineer"
# How often the story reads the session for new events. Each read is a few milliseconds of
# SQLite; at 50 ms the wait for the next read was most of the time to the first step's line
# and to the recovered run's exit.
FOLLOW_POLL_S = 0.01
_SETTLED = (SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.ABORTED)


def validate_crash_spec(spec: str) -> str:
    point = spec.partition(":")[0]
    if point not in CRASH_POINTS:
        raise ConfigurationError(
            f"unknown crash point {point!r}; choose one of: {', '.join(sorted(CRASH_POINTS))}"
        )
    return spec


async def _demo(
    workdir: Path,
    budget_s: float | None,
    model: Model | None,
    store_url: str | None,
    queue_url: str,
) -> int:
    style = Style()
    agent = engineer(workdir, model)
    db = str(workdir / "demo.db")
    where = f"--store {store_url}" if store_url else f"--db {db}"
    settings = WorkerSettings(lease_ttl_s=10.0, heartbeat_s=2.0, scan_interval_s=1.0)
    async with Runtime(
        [agent],
        store=store_url or f"sqlite:///{(workdir / 'demo.db').resolve()}",
        queue=queue_url,
        settings=settings,
        invocation_budget_s=budget_s,
    ) as rt:
        if queue_url != "local":
            print(style.dim(f"queue: {queue_url}; the turn runs on `fxdurable worker` processes"))
        rt.install_signal_handlers()
        session = rt.session(SESSION)
        journal = rt.journal
        subs = await asyncio.to_thread(journal.read, lambda v: list(v.submissions(SESSION)))
        unsettled = [s for s in subs if s.status not in _SETTLED]
        cursor = 0
        if unsettled:
            print(
                style.yellow(
                    f"Recovering session '{SESSION}': {len(unsettled)} unfinished turn(s) found "
                    f"in {store_url or db}. Resuming from the last committed step."
                )
            )
            state = await session.record()
            cursor = (state.next_event_seq - 1) if state else 0
            targets = [Submission.of(s) for s in unsettled]
        else:
            prompt = PROMPT if not subs else FOLLOW_UP
            if subs:
                print(
                    style.dim(
                        "The release story already ran in this directory; sending a follow-up "
                        f"message. (Remove {workdir} to start over.)"
                    )
                )
            else:
                print(
                    style.bold(f"fxdurable demo: a durable agent turn, stored in {store_url or db}")
                )
            state = await session.record()
            cursor = (state.next_event_seq - 1) if state else 0
            targets = [await session.submit(prompt, request_id=f"demo-{len(subs) + 1}")]
        final = await _follow(rt, session, targets, cursor, style)
    if final is None:
        print(
            style.yellow(
                "\nStopped at a step boundary; nothing is lost. Run `fxdurable demo` again to "
                "continue the turn."
            )
        )
        return 3
    print()
    for sub in final:
        if sub.status == SubmissionStatus.COMPLETED:
            print(style.green(f"Outcome: completed — {sub.result}"))
        else:
            reason = sub.error.message if sub.error else sub.status.value
            print(style.red(f"Outcome: {sub.status} — {reason}"))
    print(style.dim(f"Trace: fxdurable trace {SESSION} {where}    Audit: fxdurable check {where}"))
    return 0 if all(s.status == SubmissionStatus.COMPLETED for s in final) else 1


async def _follow(
    rt: Runtime,
    session: SessionHandle,
    targets: list[Submission],
    cursor: int,
    style: Style,
) -> list[Submission] | None:
    """Print the session's events as workers record them, until every target settles
    (or None when a SIGINT/SIGTERM stopped the runtime first)."""
    while True:
        stopped = rt.stopped
        records = [await session.submission(t.id) for t in targets]
        for event in await session.events(after=cursor):
            cursor = event.seq
            line = describe(event, style)
            if line is not None:
                print(f"  {line}", flush=True)
        # Read the outcome before the events: the last events are printed before returning.
        if all(r is not None and r.settled for r in records):
            return [r for r in records if r is not None]
        if stopped:
            return None
        await asyncio.sleep(FOLLOW_POLL_S)


@contextlib.contextmanager
def _model_for(provider: str) -> Iterator[Model | None]:
    """``scripted`` runs the model in process; ``openai``/``anthropic`` serve the same scripted
    policy from a local HTTP server in that provider's wire format, with real models' quirks,
    so the demo goes through the real httpx client."""
    if provider == "scripted":
        yield None
        return
    from fxdurable.runtime.models.anthropic import AnthropicModel
    from fxdurable.runtime.models.openai import OpenAIModel
    from fxdurable.testing.model_server import ScriptedModelServer
    from fxdurable.testing.wire_common import Quirks

    quirks = Quirks(pretty_arguments=True, split_arguments=4, usage_last=True)
    with ScriptedModelServer(policy(), quirks=quirks) as server:
        print(f"model: scripted, served as {provider} streams by a local server at {server.url}")
        if provider == "openai":
            yield OpenAIModel("scripted-demo", base_url=server.openai_base_url, api_key="sk-demo")
        else:
            yield AnthropicModel(
                "scripted-demo", base_url=server.anthropic_base_url, api_key="sk-ant-demo"
            )


def run_demo(
    *,
    crash_at: str | None,
    directory: str,
    budget_s: float | None,
    provider: str = "scripted",
    store_url: str | None = None,
    queue_url: str = "local",
) -> int:
    if crash_at:
        os.environ["FXD_CRASH_AT"] = validate_crash_spec(crash_at)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Each line reaches a pipe before a crash point's SIGKILL can cut the story short.
        sys.stdout.reconfigure(line_buffering=True)
    workdir = Path(directory)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with _model_for(provider) as model:
            code = asyncio.run(_demo(workdir, budget_s, model, store_url, queue_url))
        if crash_at:
            print(
                f"note: crash point {crash_at} was never reached in this run "
                "(continuation.* needs --invocation-budget; abort.*, steer.* and subagent.* "
                "have no step in the demo story)",
                file=sys.stderr,
            )
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
