"""``fxdurable demo``: the durable-turn story on the embedded store, in the current directory.

First run: tests, then an unsafe deploy. Crash it with ``--crash-at tool.after-execute:deploy``
and run it again: the recovered turn says the outcome is unknown, inspects production, and
does not deploy twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from fxdurable.cli.demo_agent import FOLLOW_UP, PROMPT, TOOL_NAMES, engineer, policy
from fxdurable.cli.demo_ledger import ledger_path
from fxdurable.cli.follow import (
    arm_crash,
    event_cursor,
    follow,
    line_buffered_stdout,
    submissions,
    unfinished,
)
from fxdurable.cli.render import Style
from fxdurable.core.crash import check_crash_at, check_crash_tool
from fxdurable.core.states import SubmissionStatus
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.runtime import Runtime
from fxdurable.runtime.worker import WorkerSettings

__all__ = ["run_demo"]

SESSION = "engineer"


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
    store = store_url or f"sqlite:///{(workdir / 'demo.db').resolve()}"
    ledger = ledger_path(workdir, store)
    async with Runtime(
        [agent],
        store=store,
        queue=queue_url,
        settings=settings,
        invocation_budget_s=budget_s,
    ) as rt:
        if queue_url != "local":
            print(style.dim(f"queue: {queue_url}; the turn runs on `fxdurable worker` processes"))
        rt.install_signal_handlers()
        session = rt.session(SESSION)
        subs = await submissions(rt, SESSION)
        unsettled = unfinished(subs)
        if unsettled:
            print(
                style.yellow(
                    f"Recovering session '{SESSION}': {len(unsettled)} unfinished turn(s) found "
                    f"in {store_url or db}. Resuming from the last committed step."
                )
            )
            cursor = await event_cursor(session)
            targets = unsettled
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
            cursor = await event_cursor(session)
            targets = [await session.submit(prompt, request_id=f"demo-{len(subs) + 1}")]
        final = await follow(rt, session, targets, cursor, style)
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
    print(style.dim(f"Deploys on record (the outside world): {_shown(ledger)}"))
    print(style.dim(f"Trace: fxdurable trace {SESSION} {where}    Audit: fxdurable check {where}"))
    print(style.bold("See it in the web console (kill -9 its worker there, watch it recover):"))
    print(f"  {_command_name()} serve --dev --demo {where}")
    print(f"  then open http://127.0.0.1:8000/console/#/sessions/{SESSION}")
    return 0 if all(s.status == SubmissionStatus.COMPLETED for s in final) else 1


def _shown(path: Path) -> Path:
    """``path`` relative to the current directory when it is under it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _command_name() -> str:
    """How the user ran this command (``make demo``: ``.venv/bin/fxdurable``), so the line
    it prints runs as it is."""
    ran = sys.argv[0] if sys.argv else ""
    return shlex.quote(ran) if Path(ran).name == "fxdurable" else "fxdurable"


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
    # Before anything is admitted: a crash point that does not exist, or names no tool of the
    # demo agent, would let the story run to its end instead of crashing where asked.
    source = "--crash-at" if crash_at else "FXD_CRASH_AT"
    check_crash_tool(check_crash_at(crash_at, source=source), TOOL_NAMES, source=source)
    arm_crash(crash_at)
    line_buffered_stdout()
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
