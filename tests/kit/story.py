"""The story agent and its outside world: the subject of every crash suite.

The story (prompt :data:`STORY`, or ``story <tag>`` for short): ``read_state`` → ``charge``
(idempotent) → ``deploy`` (unsafe) → the final answer :func:`done_text`. After a deploy whose
outcome is unknown, the scripted model inspects with ``check_deploy`` and never deploys again.
:data:`FOLLOW_UP` is answered after one ``read_state``. ``ticks <n> <tag>`` calls the safe
``tick`` tool ``n`` times, one per round (a long turn, for the deadline tests).
``provision <tag>`` calls the durable ``provision`` tool once (two steps: ``tenant``, which
looks the tenant up before creating it, then ``dns``, which does not look) and ends with
:func:`provisioned_text`. For a tenant named ``overquota...`` the ``tenant`` step raises
:class:`QuotaExceeded` the first time it runs in this world (``quota.txt``) and the tool
takes the step ``fallback`` instead (a shared tenant), then ``dns``.
``welcome <tag>`` calls ``send_welcome`` (idempotent, guarded by the persisted state
``welcomed``: it sends only if the session has not welcomed anyone yet, then sets it) and ends
with :func:`welcomed_text`; ``welcome and upgrade <tag>`` then calls the unsafe
``upgrade_plan`` (which sets the state ``plan``); :data:`ACCOUNT` calls ``read_account``, which
answers the session's persisted state as JSON.
``batch <tag>`` asks, in one response, for ``survey`` (safe),
``read_state`` (safe) and ``reserve`` (idempotent): a parallel batch, in which survey and
reserve hold for :data:`BATCH_HOLD_S` on their first run, so a crash at
``tool.after-record:read_state`` finds them both running. It ends with :func:`batched_text`,
which quotes the three results in the order the model read them.

The outside world lives in one directory, every line written with ``O_APPEND`` and fsynced
(:func:`append_line`):

- ``ledger.txt``: the charge downstream's idempotency keys. It dedupes on them, and a charge is
  this one append: the ledger is the only record of the charges;
- ``effects.log``: ``deploy <execution_id>`` every time deploy takes effect,
  ``reserve <execution_id>`` every time reserve does (it dedupes on the key), and
  ``provision <execution_id> <step>`` every time a step of provision does (``tenant``,
  ``fallback``, ``dns``);
- ``tenants.txt``: the tenants provision's ``tenant`` step created (one name a line);
- ``effects.log`` also has ``send_welcome <execution_id>`` for every welcome the mail service
  sent (it dedupes on the execution id, as its idempotency key), ``send_welcome
  <execution_id> skipped`` for a call that found the session welcomed already (no effect), and
  ``upgrade_plan <execution_id>`` for every upgrade (no idempotency at all);
- ``calls.log``: ``<tool> <execution_id> <run> <pid>`` for every execution of every tool,
  and ``provision.<step> ...`` for every time a step's function ran;
- ``hooks.log``: ``<tool>`` for every call of a logging ``before_tool`` hook (the crash
  driver's ``hook`` and ``ask`` scenarios, :func:`asking_hook`);
- ``model.log``: ``[prompt, round, pid]`` (JSON) for every request the scripted model serves;
- ``interruptions.log``: a line for every request showing the model a reply a crash cut off
  (:func:`log_interruptions`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

import fxdurable as fx
from fxdurable.runtime.agent import BeforeTool
from fxdurable.runtime.models.base import INTERRUPTED_NOTE, Model, without_interruptions

AGENT = "crash-agent"
SESSION = "s"
STORY_REQUEST = "crash-1"
NEXT_REQUEST = "crash-next"
STORY = "Read the state, charge order 42 and deploy release 2.0."
FOLLOW_UP = "status?"
UNKNOWN_MARK = "may or may not have completed"
_NAMED = re.compile(r"charge order (\S+) and deploy release (\S+?)\.?$")
_TICKS = re.compile(r"ticks (\d+) (.+)", re.DOTALL)
_PROVISION = re.compile(r"provision (\S+)")
_DELEGATE = re.compile(r"delegate2? \S+")
_WELCOME = re.compile(r"welcome (and upgrade )?(\S+)")
ACCOUNT = "account?"
SKIPPED = "skipped"  # an effects.log line's last word: a guarded call that took no effect
_BATCH = re.compile(r"batch (\S+)")
# ``sequence <tag>``: read_state, charge and deploy asked in one response, run one after
# another (the crash driver's ``sequence`` scenario runs it with parallel_tools=False), so
# each result but the last commits with the next call's intent.
_SEQUENCE = re.compile(r"sequence (\S+)")
# How long survey and reserve hold on their first run: far longer than read_state, their
# sibling in the batch, takes to run and record on a loaded machine.
BATCH_HOLD_S = 1.5


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


# -- what the prompts say ----------------------------------------------------------------------


def subject(prompt: str) -> tuple[str, str]:
    """The ``(order, release)`` a story prompt names: ``... charge order O and deploy release
    R.``, or ``story T`` (both ``T``). Any other prompt (a steer, a fuzzer's) tells
    :data:`STORY`'s story."""
    named = _NAMED.search(prompt)
    if named:
        return named[1], named[2]
    if prompt.startswith("story "):
        tag = prompt.removeprefix("story ").strip()
        return tag, tag
    return subject(STORY)


def is_story(prompt: str) -> bool:
    """Whether a turn with this prompt tells the story, so may deploy (once)."""
    return (
        prompt not in (FOLLOW_UP, ACCOUNT)
        and not _TICKS.fullmatch(prompt)
        and not _PROVISION.fullmatch(prompt)
        and not _BATCH.fullmatch(prompt)
        and not _WELCOME.fullmatch(prompt)
        and not is_delegation(prompt)
        and not prompt.startswith("research ")
    )


def is_delegation(prompt: str) -> bool:
    """``delegate <tag>`` / ``delegate2 <tag>``: a turn of the research subagent."""
    return _DELEGATE.fullmatch(prompt) is not None


class QuotaExceeded(Exception):
    """What provision's ``tenant`` step raises for an ``overquota...`` tenant, the first time."""


def provisioned_text(tag: str) -> str:
    """How ``provision <tag>`` ends."""
    return f"Provisioned {tag}: tenant t-{tag} at {tag}.example.com."


def welcomed_text(result: str) -> str:
    """How ``welcome <tag>`` ends, after ``send_welcome`` returned ``result``."""
    return f"Welcome: {result}."


def batched_text(tag: str, results: Sequence[str] | None = None) -> str:
    """How ``batch <tag>`` ends: the batch's results as the model read them (by default, the
    results it should read, in the order it asked)."""
    if results is None:
        results = ["disk surveyed", READ_STATE_RESULT, f"{tag} reserved"]
    return f"Batch {tag}: " + " | ".join(results)


def opening(order: str, release: str) -> str:
    then = f"charge order {order} and deploy release {release}"
    return f"I will read the current state first, then {then}."


def done_text(order: str, release: str | None = None) -> str:
    """The story's normal end; ``story T`` ends with ``done_text(T)``."""
    return f"Done: order {order} charged and release {release or order} deployed."


# Longer than one ScriptedModel chunk (16 characters): model.mid-stream needs a second delta.
OPENING = opening(*subject(STORY))
DONE_TEXT = done_text(*subject(STORY))


# -- the tools -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Timings:
    """Seconds each tool takes: ``tool_s`` every tool but check_deploy and tick; ``read_s``
    (read_state) and ``deploy_s`` (deploy, before its effect) instead, when set; ``tick_s``
    each tick."""

    tool_s: float = 0.0
    read_s: float = 0.0
    deploy_s: float = 0.0
    tick_s: float = 0.0


class NoInput(pydantic.BaseModel):
    pass


class ChargeInput(pydantic.BaseModel):
    order: str
    amount_cents: int


class DeployInput(pydantic.BaseModel):
    version: str


class TickInput(pydantic.BaseModel):
    n: int


class ProvisionInput(pydantic.BaseModel):
    tenant: str


class WelcomeInput(pydantic.BaseModel):
    user: str


class PlanInput(pydantic.BaseModel):
    plan: str


class SurveyInput(pydantic.BaseModel):
    part: str


class ReserveInput(pydantic.BaseModel):
    item: str


READ_STATE_RESULT = "the order is unpaid; production runs release 1.9"


def story_tools(world: Path, timings: Timings) -> list[fx.Tool]:
    effects = world / "effects.log"
    ledger = world / "ledger.txt"
    calls = world / "calls.log"

    def log_call(tool: str, ctx: fx.ToolContext) -> None:
        append_line(calls, f"{tool} {ctx.execution_id} {ctx.attempt} {os.getpid()}")

    def read_state(_: NoInput, ctx: fx.ToolContext) -> str:
        log_call("read_state", ctx)
        time.sleep(timings.read_s or timings.tool_s)
        return READ_STATE_RESULT

    def charge(inp: ChargeInput, ctx: fx.ToolContext) -> str:
        # The downstream payment system: it dedupes on the idempotency key it is given, and
        # its ledger line is the charge (one append: nothing to tear apart by a SIGKILL).
        log_call("charge", ctx)
        time.sleep(timings.tool_s)
        if ctx.execution_id in read_lines(ledger):
            return f"order {inp.order} was already charged (idempotency key {ctx.execution_id})"
        append_line(ledger, ctx.execution_id)
        return f"charged {inp.amount_cents} cents for order {inp.order}"

    def deploy(inp: DeployInput, ctx: fx.ToolContext) -> str:
        # No idempotency at all: every execution that gets past the sleep is a deploy.
        log_call("deploy", ctx)
        # Progress (state, never history): every crash suite runs a call that reports it, and
        # ``tool.after-progress:deploy`` kills the process mid-call once it is durable.
        ctx.progress(f"deploying release {inp.version}")
        time.sleep(timings.deploy_s or timings.tool_s)
        append_line(effects, f"deploy {ctx.execution_id}")
        return f"release {inp.version} deployed"

    def check_deploy(_: NoInput, ctx: fx.ToolContext) -> str:
        log_call("check_deploy", ctx)
        deploys = [line for line in read_lines(effects) if line.startswith("deploy ")]
        return f"{len(deploys)} deploy(s) on record"

    def tick(inp: TickInput, ctx: fx.ToolContext) -> str:
        log_call("tick", ctx)
        time.sleep(timings.tick_s)
        return f"tick {inp.n} done"

    tenants = world / "tenants.txt"
    quota = world / "quota.txt"

    async def provision(inp: ProvisionInput, ctx: fx.ToolContext) -> str:
        # A durable tool: its effects are its steps', each recorded once and replayed after a
        # crash. ``tenant`` checks before it creates (a crash inside it runs it again);
        # ``dns`` does not, so it relies on its record alone.
        log_call("provision", ctx)

        def create_tenant() -> str:
            log_call("provision.tenant", ctx)
            if inp.tenant.startswith("overquota") and not quota.exists():
                append_line(quota, inp.tenant)  # the quota frees up after this refusal
                raise QuotaExceeded(f"no tenant quota left for {inp.tenant}")
            if inp.tenant not in read_lines(tenants):
                append_line(tenants, inp.tenant)
                append_line(effects, f"provision {ctx.execution_id} tenant")
            return f"t-{inp.tenant}"

        def create_dns() -> str:
            log_call("provision.dns", ctx)
            append_line(effects, f"provision {ctx.execution_id} dns")
            return f"{inp.tenant}.example.com"

        def share_tenant() -> str:
            log_call("provision.fallback", ctx)
            append_line(effects, f"provision {ctx.execution_id} fallback")
            return f"shared-{inp.tenant}"

        try:
            tenant = await ctx.step("tenant", create_tenant)
        except QuotaExceeded:  # the fallback branch: recorded, it is the branch replayed
            tenant = await ctx.step("fallback", share_tenant)
        host = await ctx.step("dns", create_dns)
        return f"tenant {tenant} at {host}"

    def send_welcome(inp: WelcomeInput, ctx: fx.ToolContext) -> str:
        # A one-shot side effect guarded by persisted state: the state says whether this
        # session welcomed anyone (across calls and turns); the execution id, which the mail
        # service dedupes on, covers a retry of this very call (its state write never
        # committed, as recovery re-runs it).
        log_call("send_welcome", ctx)
        if ctx.state.get("welcomed"):
            append_line(effects, f"send_welcome {ctx.execution_id} {SKIPPED}")
            return f"{ctx.state['welcomed']} was already welcomed"
        if f"send_welcome {ctx.execution_id}" not in read_lines(effects):
            append_line(effects, f"send_welcome {ctx.execution_id}")
        ctx.state["welcomed"] = inp.user
        return f"welcome sent to {inp.user}"

    def upgrade_plan(inp: PlanInput, ctx: fx.ToolContext) -> str:
        log_call("upgrade_plan", ctx)
        append_line(effects, f"upgrade_plan {ctx.execution_id}")
        ctx.state["plan"] = inp.plan
        return f"plan upgraded to {inp.plan}"

    def read_account(_: NoInput, ctx: fx.ToolContext) -> str:
        log_call("read_account", ctx)
        return json.dumps(dict(ctx.state), sort_keys=True)

    def survey(inp: SurveyInput, ctx: fx.ToolContext) -> str:
        log_call("survey", ctx)
        if ctx.attempt == 1:
            time.sleep(BATCH_HOLD_S)
        return f"{inp.part} surveyed"

    def reserve(inp: ReserveInput, ctx: fx.ToolContext) -> str:
        # A downstream that dedupes on the idempotency key: one effect per execution id.
        log_call("reserve", ctx)
        if ctx.attempt == 1:
            time.sleep(BATCH_HOLD_S)
        if f"reserve {ctx.execution_id}" not in read_lines(effects):
            append_line(effects, f"reserve {ctx.execution_id}")
        return f"{inp.item} reserved"

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
            replay="idempotent",
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
        fx.define_tool("tick", description="One slow step.", input_model=TickInput, execute=tick),
        fx.define_tool(
            "provision",
            description="Create a tenant and its DNS name.",
            input_model=ProvisionInput,
            execute=provision,
            durable=True,
        ),
        fx.define_tool(
            "send_welcome",
            description="Send the welcome email, once per session.",
            input_model=WelcomeInput,
            execute=send_welcome,
            replay="idempotent",
        ),
        fx.define_tool(
            "upgrade_plan",
            description="Upgrade the account's plan.",
            input_model=PlanInput,
            execute=upgrade_plan,
            replay="unsafe",
        ),
        fx.define_tool(
            "read_account",
            description="Read the session's account state.",
            input_model=NoInput,
            execute=read_account,
        ),
        fx.define_tool(
            "survey", description="Survey a part.", input_model=SurveyInput, execute=survey
        ),
        fx.define_tool(
            "reserve",
            description="Reserve an item (the downstream dedupes on the idempotency key).",
            input_model=ReserveInput,
            execute=reserve,
            replay="idempotent",
        ),
    ]


# -- the scripted model ----------------------------------------------------------------------


def current_turn(messages: Sequence[Any]) -> list[Any]:
    """The messages since the last user message: the current turn, as the model sees it. A
    reply a crash cut off and its note are left out (``interruptions.log`` records them)."""
    items = without_interruptions(messages)
    for i in range(len(items) - 1, -1, -1):
        if getattr(items[i], "role", None) == "user":
            return items[i:]
    return items


def asked(turn: Sequence[Any]) -> str:
    return getattr(turn[0], "text", "") if turn else ""


def sequenced_text(tag: str) -> str:
    """The answer that ends a ``sequence <tag>`` turn."""
    return f"Sequence {tag} done."


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    """The scripted model: reacts to the conversation, as a model would after a recovery."""
    turn = current_turn(request.messages)
    prompt = asked(turn)
    results = [m for m in turn if getattr(m, "role", None) == "tool"]
    last = results[-1] if results else None
    if prompt == FOLLOW_UP:
        if last is None:
            return fx.reply("Let me read the current state.", fx.call("read_state"))
        return fx.reply(f"Status: {last.text}")
    ticks = _TICKS.fullmatch(prompt)
    if ticks:
        count, tag = int(ticks[1]), ticks[2]
        if len(results) < count:
            return fx.reply(f"tick {len(results) + 1}", fx.call("tick", n=len(results) + 1))
        return fx.reply(f"Ticked {count} times: {tag}")
    if is_delegation(prompt):  # the research subagent's turn; that module builds on this one
        from tests.kit.delegation import delegation_reply

        return delegation_reply(prompt, [m.text for m in results])
    provision = _PROVISION.fullmatch(prompt)
    if provision:
        if last is None:
            return fx.reply("Provisioning.", fx.call("provision", tenant=provision[1]))
        if last.text.startswith("tenant "):
            return fx.reply(provisioned_text(provision[1]))
        return fx.reply(f"Provisioning failed: {last.text}")
    welcome = _WELCOME.fullmatch(prompt)
    if welcome:
        return _welcome_policy(last, upgrade=welcome[1] is not None, user=welcome[2])
    if prompt == ACCOUNT:
        if last is None:
            return fx.reply("Reading the account.", fx.call("read_account"))
        return fx.reply(f"Account: {last.text}")
    batch = _BATCH.fullmatch(prompt)
    if batch:
        if last is None:
            return fx.reply(
                f"Surveying {batch[1]} in parallel.",
                fx.call("survey", part="disk"),
                fx.call("read_state"),
                fx.call("reserve", item=batch[1]),
            )
        return fx.reply(batched_text(batch[1], [m.text for m in results]))
    sequence = _SEQUENCE.fullmatch(prompt)
    if sequence:
        tag = sequence[1]
        if last is None:
            return fx.reply(
                f"Reading, charging {tag} and deploying {tag}.",
                fx.call("read_state"),
                fx.call("charge", order=tag, amount_cents=4200),
                fx.call("deploy", version=tag),
            )
        if last.tool_name == "deploy" and UNKNOWN_MARK in last.text:
            return fx.reply("The deploy's outcome is unknown; inspecting.", fx.call("check_deploy"))
        return fx.reply(sequenced_text(tag))
    order, release = subject(prompt)
    if last is None:
        return fx.reply(opening(order, release), fx.call("read_state"))
    if last.tool_name == "read_state":
        return fx.reply(
            f"State read; charging order {order}.",
            fx.call("charge", order=order, amount_cents=4200),
        )
    if last.tool_name == "charge":
        return fx.reply(
            f"Charged; deploying release {release}.", fx.call("deploy", version=release)
        )
    if last.tool_name == "deploy":
        if UNKNOWN_MARK in last.text:
            return fx.reply(
                "The deploy's outcome is unknown; inspecting production before deciding.",
                fx.call("check_deploy"),
            )
        return fx.reply(done_text(order, release))
    if last.tool_name == "check_deploy":
        return fx.reply(f"The deploy was interrupted; {last.text}. I will not deploy again.")
    return fx.reply(f"Unexpected result from {last.tool_name}: {last.text}")


def _welcome_policy(last: Any, *, upgrade: bool, user: str) -> fx.ModelResponse:
    if last is None:
        return fx.reply("Welcoming.", fx.call("send_welcome", user=user))
    if last.tool_name == "send_welcome" and upgrade:
        return fx.reply("Upgrading the plan.", fx.call("upgrade_plan", plan="pro"))
    if last.tool_name == "upgrade_plan":
        if UNKNOWN_MARK in last.text:
            return fx.reply("The upgrade's outcome is unknown; I will not repeat it blindly.")
        return fx.reply(f"Upgraded: {last.text}.")
    return fx.reply(welcomed_text(last.text))


def log_interruptions(world: Path, request: fx.ModelRequest, prompt: str, round_: int) -> None:
    """For a request that shows the model a reply a crash cut off, append to
    ``interruptions.log`` (JSON) ``{"prompt", "round", "cut": [the text of each message
    just before a note], "notes": how many notes}``."""
    messages = list(request.messages)
    notes = [i for i, m in enumerate(messages) if m.role == "user" and m.text == INTERRUPTED_NOTE]
    if notes:
        cut = [messages[i - 1].text for i in notes if i > 0]
        line = {"prompt": prompt, "round": round_, "cut": cut, "notes": len(notes)}
        append_line(world / "interruptions.log", json.dumps(line))


def logged_policy(world: Path) -> Callable[[fx.ModelRequest], fx.ModelResponse]:
    """The policy, logging each request it serves to ``model.log``: a step served from its
    record never shows up twice."""
    return logged_requests(world, policy)


def logged_requests(
    world: Path, answer: Callable[[fx.ModelRequest], fx.ModelResponse]
) -> Callable[[fx.ModelRequest], fx.ModelResponse]:
    """``answer``, logging each request it serves to ``model.log``."""
    requests = world / "model.log"

    def logged(request: fx.ModelRequest) -> fx.ModelResponse:
        turn = current_turn(request.messages)
        round_ = sum(1 for m in turn if getattr(m, "role", None) == "assistant")
        append_line(requests, json.dumps([asked(turn), round_, os.getpid()]))
        log_interruptions(world, request, asked(turn), round_)
        return answer(request)

    return logged


def question_for(tool: str, arguments_json: str) -> str:
    """What :func:`asking_hook` asks a person before ``tool``."""
    return f"May I {tool} {arguments_json}?"


def asking_hook(world: Path, ask_before: str, timeout_s: float | None = None) -> BeforeTool:
    """A ``before_tool`` hook that logs every call to ``hooks.log`` and asks a person before
    the tool ``ask_before`` (``fx.ask``, expiring after ``timeout_s`` if set), allowing
    every other."""
    hooks = world / "hooks.log"

    async def hook(tool_name: str, arguments_json: str) -> fx.Ask | None:
        append_line(hooks, tool_name)
        if tool_name == ask_before:
            return fx.ask(question_for(tool_name, arguments_json), timeout_s=timeout_s)
        return None

    return hook


def story_agent(
    world: Path,
    *,
    timings: Timings | None = None,
    model: Model | None = None,
    before_tool: BeforeTool | None = None,
    durability: fx.Durability | None = None,
    subagents: bool = False,
    barrier: bool = False,
    parallel_tools: bool = True,
    webhook: fx.Webhook | None = None,
) -> fx.Agent:
    """The story's agent, its outside world in ``world``; the scripted model by default.
    ``subagents``: it also declares ``research`` (:mod:`tests.kit.delegation`), whose
    children meet at a barrier with ``barrier``; ``webhook``: its settlement webhook."""
    tools = story_tools(world, timings or Timings())
    if subagents:
        from tests.kit.delegation import research_tool  # it builds on this module

        tools.append(research_tool(world, barrier=barrier))
    return fx.Agent(
        AGENT,
        model or fx.ScriptedModel(logged_policy(world), name="scripted/story"),
        instructions="You run the crash suites' story.",
        tools=tools,
        before_tool=before_tool,
        durability=durability,
        parallel_tools=parallel_tools,
        webhook=webhook,
    )
