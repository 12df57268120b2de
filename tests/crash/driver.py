"""The crash suite's subject: a real process running one agent session to rest.

Run as ``python tests/crash/driver.py --store URL --dir D --scenario NAME [--next]
[--invocation-budget S] [--provider P] [--partial-every S]``, with
``FXD_CRASH_AT=<point>[:<tool>]`` in the environment to kill it at a named crash point. It only
uses the public API of :mod:`fxdurable` (and ``fxdurable.testing``; one private hook,
``ScriptedModelServer._respond``, to mimic a gateway that quotes a wrong key back).

The story (session ``s``, request id ``crash-1``): ``read_state`` → ``charge`` → ``deploy`` →
final answer. After a deploy whose outcome is unknown, the scripted model inspects with
``check_deploy`` and never deploys again. ``--next`` sends the follow-up ``status?`` (request id
``crash-next``), answered after one ``read_state``. Every run without ``--next`` submits the story
again with the same request id, as a client retrying its POST would (admission is idempotent).

The outside world lives in ``D``, every line written with ``O_APPEND`` and fsynced:

- ``effects.log``: ``charge <execution_id>`` (once per new idempotency key) and
  ``deploy <execution_id>`` (every time deploy runs): the external effects;
- ``ledger.txt``: the charge downstream's idempotency keys (it dedupes on them);
- ``calls.log``: ``<tool> <execution_id> <run>`` for every execution of every tool;
- ``hooks.log``: ``<tool>`` for every ``before_tool`` call (scenario ``hook``);
- ``model.log``: ``<story|next> r<round>`` for every request the scripted model serves.

Scenarios: ``story`` (plain); ``abort`` (read_state is slow and the driver aborts the session
once it has started); ``abort-deploy`` (the same with the unsafe deploy); ``hook`` (an
allow-all ``before_tool`` hook); ``continuation`` (tools take a little time so a small
``--invocation-budget`` expires and the turn spans several invocations). ``--max-attempts``
sets the agent's attempt budget; ``--hostname`` makes the process pose as another machine;
``--partial-every`` sets ``Durability.partial_text_every_s``.

``--provider`` picks the model boundary. ``inprocess`` (the default): a ``ScriptedModel``
calls the policy directly. ``openai`` / ``anthropic``: the driver starts a
``ScriptedModelServer`` in process (a background thread) serving the SAME policy in that wire
format, with real-model quirks on (pretty-printed and split tool arguments, usage last, the
response held open after the finish, small HTTP chunks) and the API key required; the agent's
model is ``OpenAIModel`` / ``AnthropicModel`` pointed at it, reading the key from the
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` the driver sets for itself (``API_KEY``; with
``--wrong-key``, ``WRONG_KEY``, which the server answers with a 401 that quotes it back, as
some gateways do). So every model call goes through the real httpx + SSE path, and
``model.log`` is written by the server's policy. On a clean exit the driver appends what the
server saw to ``D/http.jsonl``: one line per process, ``{"pid", "provider", "echoed" (401s
that quoted the key), "requests": [{"path", "status", "headers" (credentials redacted by the
server), "body"}]}``; a SIGKILLed run writes nothing there.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pydantic

import fxdurable as fx
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.testing import Quirks, ScriptedModelServer

SESSION = "s"
STORY_REQUEST = "crash-1"
NEXT_REQUEST = "crash-next"
STORY = "Read the state, charge order 42 and deploy release 2.0."
FOLLOW_UP = "status?"
# Longer than one ScriptedModel chunk (16 characters): model.mid-stream needs a second delta.
OPENING = "I will read the current state first, then charge order 42 and deploy release 2.0."
UNKNOWN_MARK = "may or may not have completed"
SCENARIOS = ("story", "abort", "abort-deploy", "hook", "continuation")
SETTLED = ("completed", "failed", "aborted")
PROVIDERS = ("inprocess", "openai", "anthropic")
AnyModel = fx.ScriptedModel | OpenAIModel | AnthropicModel
# Fake keys: the tests check that neither ever reaches the database, the logs or the output.
API_KEY = "sk-test-crash-SECRET-1234"
WRONG_KEY = "sk-test-crash-WRONG-5678"
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
TEXT_CHUNK_CHARS = 16  # the server streams text in deltas of this many characters
HOLD_OPEN_S = 2.0  # the server keeps each response open this long after its last event
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


def append_line(path: Path, line: str) -> None:
    """One durable line: O_APPEND (atomic w.r.t. other appenders) and fsync before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class NoInput(pydantic.BaseModel):
    pass


class ChargeInput(pydantic.BaseModel):
    order: str
    amount_cents: int


class DeployInput(pydantic.BaseModel):
    version: str


def build_tools(
    workdir: Path, *, slow_read_s: float, slow_deploy_s: float, step_s: float
) -> list[fx.Tool]:
    effects = workdir / "effects.log"
    ledger = workdir / "ledger.txt"
    calls = workdir / "calls.log"

    def read_state(_: NoInput, ctx: fx.ToolContext) -> str:
        append_line(calls, f"read_state {ctx.execution_id} {ctx.attempt}")
        time.sleep(slow_read_s or step_s)
        return "order 42 is unpaid; production runs release 1.9"

    def charge(inp: ChargeInput, ctx: fx.ToolContext) -> str:
        # The downstream payment system: it dedupes on the idempotency key it is given.
        append_line(calls, f"charge {ctx.execution_id} {ctx.attempt}")
        time.sleep(step_s)
        if ctx.execution_id in read_lines(ledger):
            return f"order {inp.order} was already charged (idempotency key {ctx.execution_id})"
        append_line(ledger, ctx.execution_id)
        append_line(effects, f"charge {ctx.execution_id}")
        return f"charged {inp.amount_cents} cents for order {inp.order}"

    def deploy(inp: DeployInput, ctx: fx.ToolContext) -> str:
        # No idempotency at all: every execution is a deploy.
        append_line(calls, f"deploy {ctx.execution_id} {ctx.attempt}")
        time.sleep(slow_deploy_s or step_s)
        append_line(effects, f"deploy {ctx.execution_id}")
        return f"release {inp.version} deployed"

    def check_deploy(_: NoInput, ctx: fx.ToolContext) -> str:
        append_line(calls, f"check_deploy {ctx.execution_id} {ctx.attempt}")
        deploys = [line for line in read_lines(effects) if line.startswith("deploy ")]
        return f"{len(deploys)} deploy(s) on record"

    return [
        fx.define_tool(
            "read_state",
            description="Read the order and production state.",
            input_model=NoInput,
            execute=read_state,
        ),
        fx.define_tool(
            "charge",
            description="Charge an order (the payment API dedupes on the idempotency key).",
            input_model=ChargeInput,
            execute=charge,
            replay=fx.Idempotent(),
        ),
        fx.define_tool(
            "deploy",
            description="Deploy a release to production.",
            input_model=DeployInput,
            execute=deploy,
            replay="unsafe",
        ),
        fx.define_tool(
            "check_deploy",
            description="Count the deploys production has on record.",
            input_model=NoInput,
            execute=check_deploy,
        ),
    ]


def current_turn(messages: Sequence[object]) -> list[object]:
    items = list(messages)
    for i in range(len(items) - 1, -1, -1):
        if getattr(items[i], "role", None) == "user":
            return items[i:]
    return items


def make_policy(workdir: Path) -> Callable[[fx.ModelRequest], fx.ModelResponse]:
    """The scripted model, logging each request it serves to ``model.log`` as
    ``<story|next> r<round>``: a recorded step served from its record never shows up twice."""
    requests = workdir / "model.log"

    def logged(request: fx.ModelRequest) -> fx.ModelResponse:
        turn = current_turn(request.messages)
        asked = getattr(turn[0], "text", "") if turn else ""
        round_ = sum(1 for m in turn if getattr(m, "role", None) == "assistant")
        append_line(requests, f"{'next' if asked == FOLLOW_UP else 'story'} r{round_}")
        return policy(request)

    return logged


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    """The scripted model: reacts to the conversation, as a model would after a recovery."""
    turn = current_turn(request.messages)
    asked = getattr(turn[0], "text", "") if turn else ""
    results = [m for m in turn if getattr(m, "role", None) == "tool"]
    last = results[-1] if results else None
    if asked == FOLLOW_UP:
        if last is None:
            return fx.reply("Let me read the current state.", fx.call("read_state"))
        return fx.reply(f"Status: {last.text}")
    if last is None:
        return fx.reply(OPENING, fx.call("read_state"))
    if last.tool_name == "read_state":
        return fx.reply(
            "State read; charging order 42.",
            fx.call("charge", order="42", amount_cents=4200),
        )
    if last.tool_name == "charge":
        return fx.reply("Charged; deploying release 2.0.", fx.call("deploy", version="2.0"))
    if last.tool_name == "deploy":
        if UNKNOWN_MARK in last.text:
            return fx.reply(
                "The deploy's outcome is unknown; inspecting production before deciding.",
                fx.call("check_deploy"),
            )
        return fx.reply("Done: order 42 charged and release 2.0 deployed.")
    if last.tool_name == "check_deploy":
        return fx.reply(f"The deploy was interrupted; {last.text}. I will not deploy again.")
    return fx.reply(f"Unexpected result from {last.tool_name}: {last.text}")


def build_agent(
    workdir: Path,
    scenario: str,
    *,
    follow_up: bool,
    max_attempts: int = 10,
    model: AnyModel | None = None,
    partial_every: float | None = None,
) -> fx.Agent:
    slow_read_s = 1.0 if scenario == "abort" and not follow_up else 0.0
    slow_deploy_s = 1.0 if scenario == "abort-deploy" else 0.0
    step_s = 0.03 if scenario == "continuation" else 0.0
    hook = None
    if scenario == "hook":
        hooks = workdir / "hooks.log"

        async def allow_all(tool_name: str, arguments_json: str) -> str | None:
            append_line(hooks, tool_name)
            return None

        hook = allow_all
    durability = fx.Durability(max_attempts=max_attempts)
    if partial_every is not None:
        durability = dataclasses.replace(durability, partial_text_every_s=partial_every)
    return fx.Agent(
        "crash-agent",
        model or fx.ScriptedModel(make_policy(workdir), name="scripted/crash"),
        instructions="You run the crash suite's story.",
        tools=build_tools(
            workdir, slow_read_s=slow_read_s, slow_deploy_s=slow_deploy_s, step_s=step_s
        ),
        before_tool=hook,
        durability=durability,
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
    server = server_type(make_policy(workdir), quirks=HTTP_QUIRKS).start()
    try:
        base_url = server.openai_base_url if args.provider == "openai" else server.url
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
        if args.next:
            await handle.submit(FOLLOW_UP, request_id=NEXT_REQUEST)
        else:
            # Like a client retrying its POST after a crash: admission is idempotent on the
            # request id, so a rerun gets the same submission back, never a second one.
            story = await handle.submit(STORY, request_id=STORY_REQUEST)
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
            "text": sub.result_text,
            "error": error,
        }
        print("outcome " + json.dumps(outcome), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:///abs/path.db")
    parser.add_argument("--dir", required=True, help="the outside world's directory")
    parser.add_argument("--scenario", choices=SCENARIOS, default="story")
    parser.add_argument("--invocation-budget", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--next", action="store_true", help="send the follow-up message")
    parser.add_argument("--max-attempts", type=int, default=10, help="the agent's budget")
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
        "--wrong-key",
        action="store_true",
        help="send WRONG_KEY instead of API_KEY (the server answers 401, quoting it)",
    )
    args = parser.parse_args(argv)
    if args.hostname:
        # Leases record host and pid; a dead process on *another* host cannot be detected, so
        # its lease must expire first and be found by the periodic scan.
        socket.gethostname = lambda: args.hostname
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
