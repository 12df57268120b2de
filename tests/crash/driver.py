"""The crash suite's subject: a real process running one agent session to rest.

Run as ``python tests/crash/driver.py --store URL --dir D --scenario NAME [--next]
[--invocation-budget S] [--provider P] [--partial-every S]``, with
``FXD_CRASH_AT=<point>[:<tool>]`` in the environment to kill it at a named crash point. It only
uses the public API of :mod:`fxdurable` (and ``fxdurable.testing``; one private hook,
``ScriptedModelServer._respond``, to mimic a gateway that quotes a wrong key back).

The story (session ``s``, request id ``crash-1``) is the shared story agent's
(``tests.kit.story``): ``read_state`` → ``charge`` → ``deploy`` → final answer, with
``check_deploy`` after a deploy whose outcome is unknown. ``--next`` sends the follow-up
``status?`` (request id ``crash-next``), answered after one ``read_state``. Every run without
``--next`` submits the story again with the same request id, as a client retrying its POST
would (admission is idempotent).

The outside world lives in ``D``, as ``tests.kit.story`` describes it: ``ledger.txt`` (the
charges), ``effects.log`` (the deploys), ``calls.log``, ``model.log``, and here ``hooks.log``:
``<tool>`` for every ``before_tool`` call (scenario ``hook``).

Scenarios: ``story`` (plain); ``abort`` (read_state is slow and the driver aborts the session
once it has started); ``abort-deploy`` (the same with the unsafe deploy); ``hook`` (an
allow-all ``before_tool`` hook); ``continuation`` (tools take a little time so a small
``--invocation-budget`` expires and the turn spans several invocations); ``provision`` (the
story request is ``provision crash``: one call of the durable, two-step ``provision`` tool);
``provision-overquota`` (``provision overquota``: its first step raises once, the tool takes a
fallback step);
``batch`` (the story request is ``batch crash``: three calls of one response, run as a
parallel batch).
``ask`` (the hook asks a person before ``deploy``, allows the rest: the run rests once the
story waits for the answer; ``--answer allow|deny`` answers it first, ``--kill-while-waiting``
SIGKILLs the process once the story waits and its lease is free). ``delegate`` / ``delegate2``
(``delegate crash`` / ``delegate2 crash``: one or two calls of the ``research`` subagent,
``tests.kit.delegation``, whose children the process runs inline; ``delegate2`` with
``parallel_tools=False``, so the second child starts after the first has answered);
``delegate2-batch`` (``delegate2 crash`` as one parallel batch: both children run at once and
meet at the researcher's barrier). ``welcome`` (the request is
``welcome crash``, the follow-up the same again: ``send_welcome`` guarded by persisted state);
``upgrade`` (``welcome and upgrade crash``, then the unsafe ``upgrade_plan``; the follow-up is
``account?``, which reads the persisted state).
``--max-attempts`` sets the agent's attempt budget, ``--on-exhausted ask`` makes it ask a
person when that runs out (the run rests on the question, as in ``ask``); ``--hostname`` makes
the process pose as another machine; ``--partial-every`` sets ``Durability.partial_text_every_s``.

``--provider`` picks the model boundary. ``inprocess`` (the default): a ``ScriptedModel``
calls the policy directly. ``openai`` / ``anthropic``: the driver starts a
``ScriptedModelServer`` in process (a background thread) serving the SAME policy in that wire
format, with real-model quirks on (pretty-printed and split tool arguments, usage last, the
response held open after the finish, small HTTP chunks) and the API key required; the agent's
model is ``OpenAIModel`` / ``AnthropicModel`` pointed at it, reading the key from the
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` the driver sets for itself (``API_KEY``; with
``--wrong-key``, ``WRONG_KEY``, which the server answers with a 401 that quotes it back, as
some gateways do). So every model call goes through the real httpx + SSE path, and
``model.log`` is written by the server's policy. ``openai-responses``: the Responses API
client (``OpenAIResponsesModel``) against the same server. Every request body the server
receives is appended, as sent, to ``D/requests.jsonl`` before it is answered (``{"pid",
"path", "raw"}``): a SIGKILLed run's requests are there too. On a clean exit the driver
appends what the server saw to ``D/http.jsonl``: one line per process, ``{"pid",
"provider", "echoed" (401s that quoted the key), "requests": [{"path", "status", "headers"
(credentials redacted by the server), "body"}]}``; a SIGKILLed run writes nothing there.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fxdurable as fx
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from fxdurable.testing import Quirks, ScriptedModelServer
from tests.kit.story import (
    ACCOUNT,
    FOLLOW_UP,
    NEXT_REQUEST,
    OPENING,
    SESSION,
    STORY,
    STORY_REQUEST,
    Timings,
    append_line,
    asking_hook,
    logged_policy,
    story_agent,
)
from tests.kit.world import SETTLED

SCENARIOS = (
    "story",
    "sequence",
    "abort",
    "abort-deploy",
    "hook",
    "ask",
    "continuation",
    "provision",
    "provision-overquota",
    "delegate",
    "delegate2",
    "delegate2-batch",
    "welcome",
    "upgrade",
    "batch",
)
ANSWERS = {"allow": fx.allow, "deny": lambda: fx.deny("not today")}
PROVISION = "provision crash"  # the prompt of scenario ``provision`` (a durable tool)
# The prompts of the subagent scenarios (tests.kit.delegation): one child; two of one response,
# one after the other; the same two in one batch, both in flight at once.
DELEGATE = {
    "delegate": "delegate crash",
    "delegate2": "delegate2 crash",
    "delegate2-batch": "delegate2 crash",
}
# The request (and the follow-up) of the other scenarios whose prompt is not the story's.
PROMPTS = {
    "provision": PROVISION,
    "provision-overquota": "provision overquota",  # its tenant step fails once: the fallback branch
    "welcome": "welcome crash",
    "upgrade": "welcome and upgrade crash",
    "batch": "batch crash",  # a parallel tool batch
    "sequence": "sequence crash",  # three calls of one response, one after another
    **DELEGATE,
}
NEXT_PROMPTS = {"welcome": "welcome crash", "upgrade": ACCOUNT}
PROVIDERS = ("inprocess", "openai", "anthropic", "openai-responses")
AnyModel = fx.ScriptedModel | OpenAIModel | AnthropicModel
# Fake keys: the tests check that neither ever reaches the database, the logs or the output.
API_KEY = "sk-test-crash-SECRET-1234"
WRONG_KEY = "sk-test-crash-WRONG-5678"
KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
}
# Every request body, as sent, appended before it is answered: survives a SIGKILL.
REQUEST_LOG = "requests.jsonl"
TEXT_CHUNK_CHARS = 16  # the server streams text in deltas of this many characters
# The server keeps each response open this long after its last event: far longer than a whole
# prompt recovery takes on a loaded machine (process start included), so a client that waited
# for the close is told apart from a prompt one by a wide margin, not by a few hundred ms.
HOLD_OPEN_S = 15.0
# What real models and gateways do (fxdurable.testing.Quirks): the client must cope with all.
HTTP_QUIRKS = Quirks(
    text_chunk_chars=TEXT_CHUNK_CHARS,
    pretty_arguments=True,
    split_arguments=5,
    usage_last=True,
    hold_open_after_finish_s=HOLD_OPEN_S,
    chunk_bytes=7,
    require_api_key=API_KEY,
)
assert len(OPENING) > 2 * TEXT_CHUNK_CHARS, "model.mid-stream needs several text deltas"


def build_agent(
    workdir: Path,
    scenario: str,
    *,
    follow_up: bool,
    max_attempts: int = 10,
    on_exhausted: str = "fail",
    model: AnyModel | None = None,
    partial_every: float | None = None,
) -> fx.Agent:
    timings = Timings(
        read_s=1.0 if scenario == "abort" and not follow_up else 0.0,
        deploy_s=1.0 if scenario == "abort-deploy" else 0.0,
        tool_s=0.03 if scenario == "continuation" else 0.0,
    )
    hook = None
    if scenario == "hook":
        hooks = workdir / "hooks.log"

        async def allow_all(tool_name: str, arguments_json: str) -> str | None:
            append_line(hooks, tool_name)
            return None

        hook = allow_all
    if scenario == "ask":
        hook = asking_hook(workdir, "deploy")
    durability = fx.Durability(max_attempts=max_attempts, on_exhausted=on_exhausted)  # type: ignore[arg-type]
    # A store written days ago (the previous release's fixture) holds a turn begun then: its
    # test lifts the wall-clock turn budget, which that turn would otherwise have run past.
    if budget := os.environ.get("FXD_CRASH_TURN_TIMEOUT_S"):
        durability = dataclasses.replace(durability, timeout_s=float(budget))
    if partial_every is not None:
        durability = dataclasses.replace(durability, partial_text_every_s=partial_every)
    return story_agent(
        workdir,
        timings=timings,
        model=model,
        before_tool=hook,
        durability=durability,
        subagents=scenario in DELEGATE,
        barrier=scenario == "delegate2-batch",
        # delegate2's crash test kills the process inside the second child and checks that
        # the first child's recorded answer is not run again: that needs the first child to
        # have answered before the second starts, i.e. the two calls not batched.
        # sequence: its three calls run one after another, each result merged with the next
        # call's intent (read_state and charge would otherwise be one batch).
        parallel_tools=scenario not in ("delegate2", "sequence"),
    )


def agents() -> list[fx.Agent]:
    """For a served process (``fxdurable serve --agents tests.crash.driver:agents``): the
    story's agent, its outside world in ``$FXD_CRASH_DIR``, its scenario ``$FXD_CRASH_SCENARIO``
    (default ``story``)."""
    workdir = Path(os.environ["FXD_CRASH_DIR"])
    return [build_agent(workdir, os.environ.get("FXD_CRASH_SCENARIO", "story"), follow_up=False)]


def http_model(provider: str, base_url: str, *, wrong_key: bool) -> AnyModel:
    """The provider's real client, pointed at the scripted server. The key is not passed in:
    the client reads it from the environment variable a deployment would set."""
    os.environ[KEY_ENV[provider]] = WRONG_KEY if wrong_key else API_KEY
    if provider == "openai":
        return OpenAIModel("crash-model", base_url=base_url)
    if provider == "openai-responses":
        return OpenAIResponsesModel("crash-model", base_url=base_url)
    return AnthropicModel("crash-model", base_url=base_url)


class KeyEchoingServer(ScriptedModelServer):
    """Answers a 401 as some gateways do: quoting the credential it was sent, in full. The
    client must keep it out of the error it records. ``echoed`` counts such answers."""

    echoed = 0

    def _respond(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Any:
        reply = super()._respond(method, target, headers, raw)
        body = getattr(reply, "body", None)
        if getattr(reply, "status", None) == 401 and isinstance(body, dict):
            sent = headers.get("x-api-key") or headers.get("authorization", "")
            error = dict(body.get("error") or {})
            error["message"] = f"{error.get('message', '')} (received: {sent})"
            reply = dataclasses.replace(reply, body={**body, "error": error})
            self.echoed += 1
        return reply


def dump_server_requests(workdir: Path, provider: str, server: ScriptedModelServer) -> None:
    requests = [
        {"path": r.path, "status": r.status, "headers": r.headers, "body": r.body}
        for r in server.requests
    ]
    echoed = server.echoed if isinstance(server, KeyEchoingServer) else 0
    line = {"pid": os.getpid(), "provider": provider, "echoed": echoed, "requests": requests}
    append_line(workdir / "http.jsonl", json.dumps(line))


async def wait_for_tool_start(handle: fx.SessionHandle, tool: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = await handle.events()
        if any(e.type == "tool.started" and e.data.get("tool") == tool for e in events):
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no tool.started event for {tool}")


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.provider == "inprocess":
        return await run_session(args, workdir, None)
    # The SAME policy, served over HTTP in the provider's wire format, in this very process: a
    # SIGKILL takes the server down with the worker, as a real crash takes down a connection.
    server_type = KeyEchoingServer if args.wrong_key else ScriptedModelServer
    quirks = dataclasses.replace(HTTP_QUIRKS, reasoning=True) if args.reasoning else HTTP_QUIRKS
    log = workdir / REQUEST_LOG
    server = server_type(logged_policy(workdir), quirks=quirks, request_log=log).start()
    try:
        base_url = server.url if args.provider == "anthropic" else server.openai_base_url
        model = http_model(args.provider, base_url, wrong_key=args.wrong_key)
        code = await run_session(args, workdir, model)
    finally:
        server.stop()
    dump_server_requests(workdir, args.provider, server)
    return code


async def run_session(args: argparse.Namespace, workdir: Path, model: AnyModel | None) -> int:
    agent = build_agent(
        workdir,
        args.scenario,
        follow_up=args.next,
        max_attempts=args.max_attempts,
        on_exhausted=args.on_exhausted,
        model=model,
        partial_every=args.partial_every,
    )
    settings = fx.WorkerSettings(lease_ttl_s=5.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime(
        [agent],
        store=args.store,
        settings=settings,
        invocation_budget_s=args.invocation_budget,
        shutdown_grace_s=2.0,
    ) as rt:
        handle = rt.session(SESSION)

        def submission_ids(view: Any) -> list[str]:
            return [s.id for s in view.submissions(SESSION)]

        existing = await asyncio.to_thread(rt.journal.read, submission_ids)
        if args.answer is not None and await handle.question() is not None:
            answered = await handle.answer(ANSWERS[args.answer]())
            print(f"answered {args.answer} for {answered.id}", flush=True)
        if args.next:
            follow_up = NEXT_PROMPTS.get(args.scenario, FOLLOW_UP)
            await handle.submit(follow_up, request_id=NEXT_REQUEST)
        else:
            # Like a client retrying its POST after a crash: admission is idempotent on the
            # request id, so a rerun gets the same submission back, never a second one.
            prompt = PROMPTS.get(args.scenario, STORY)
            story = await handle.submit(prompt, request_id=STORY_REQUEST)
            assert not existing or story.id == existing[0], (story.id, existing)
            if not existing and args.scenario in ("abort", "abort-deploy"):
                tool = "read_state" if args.scenario == "abort" else "deploy"
                await wait_for_tool_start(handle, tool, args.timeout)
                marked = await handle.abort()
                print(f"abort requested for {marked}", flush=True)

        deadline = time.monotonic() + args.timeout
        while True:
            ids = await asyncio.to_thread(rt.journal.read, submission_ids)
            subs = [await handle.submission(i) for i in ids]
            if all(s is not None and s.status in SETTLED for s in subs):
                break
            if await waits_without_lease(handle, subs):
                if args.kill_while_waiting:
                    os.write(2, b"killed while waiting for an answer\n")
                    os.kill(os.getpid(), signal.SIGKILL)
                question = await handle.question()
                print("question " + json.dumps(question and question.question), flush=True)
                return 0
            if time.monotonic() > deadline:
                print(f"timed out waiting for {ids} to settle", file=sys.stderr)
                return 3
            await asyncio.sleep(0.05)
    for sub in subs:
        assert sub is not None
        error = None if sub.error is None else {"code": sub.error.code, "msg": sub.error.message}
        outcome = {
            "request_id": sub.request_id,
            "status": str(sub.status),
            "text": sub.result,
            "error": error,
        }
        print("outcome " + json.dumps(outcome), flush=True)
    return 0


async def waits_without_lease(
    handle: fx.SessionHandle, subs: Sequence[fx.Submission | None]
) -> bool:
    """The session rests on a question: its next submission waits for an answer and no
    worker holds it (the question's attempt ended, the lease was let go)."""
    pending = [s for s in subs if s is not None and s.status not in SETTLED]
    if not pending or not pending[0].needs_input:
        return False
    record = await handle.record()
    return record is not None and record.lease.owner is None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:///abs/path.db")
    parser.add_argument("--dir", required=True, help="the outside world's directory")
    parser.add_argument("--scenario", choices=SCENARIOS, default="story")
    parser.add_argument("--invocation-budget", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--next", action="store_true", help="send the follow-up message")
    parser.add_argument("--max-attempts", type=int, default=10, help="the agent's budget")
    parser.add_argument(
        "--on-exhausted",
        choices=("fail", "ask"),
        default="fail",
        help="Durability.on_exhausted: ask a person when the attempts run out",
    )
    parser.add_argument(
        "--hostname", default=None, help="pose as this host (a worker on another machine)"
    )
    parser.add_argument("--timeout", type=float, default=45.0, help="give up after SECONDS")
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default="inprocess",
        help="the model boundary: in process, or a scripted server in that wire format",
    )
    parser.add_argument(
        "--partial-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Durability.partial_text_every_s (0: every streamed delta is written)",
    )
    parser.add_argument(
        "--reasoning",
        action="store_true",
        help="a reasoning model: the server sends thinking and refuses follow-ups without it",
    )
    parser.add_argument(
        "--wrong-key",
        action="store_true",
        help="send WRONG_KEY instead of API_KEY (the server answers 401, quoting it)",
    )
    parser.add_argument(
        "--answer", choices=sorted(ANSWERS), default=None, help="answer the pending question"
    )
    parser.add_argument(
        "--kill-while-waiting",
        action="store_true",
        help="SIGKILL this process once the story waits for an answer with its lease free",
    )
    args = parser.parse_args(argv)
    if args.hostname:
        # Leases record host and pid; a dead process on *another* host cannot be detected, so
        # its lease must expire first and be found by the periodic scan.
        socket.gethostname = lambda: args.hostname
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
