"""The OpenAI Agents SDK adapter in process: what it takes from an SDK agent (instructions,
model settings, function tools and their policies), approvals as questions, what it refuses,
and the version check. The SIGKILL tests are in ``test_openai_agents_crash.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, ModelSettings, WebSearchTool, function_tool, handoff
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic import BaseModel
from test_openai_agents_world import build

import fxdurable as fx
from fxdurable.adapters.openai_agents import (
    durable_agent,
    replay,
    tool_context,
)
from fxdurable.core.subagent import child_session_id


def scripted(*outputs: list[Any]) -> ScriptedModel:
    return ScriptedModel([list(o) for o in outputs])


def last_output(call: ModelCall) -> str:
    return str([i for i in call.input if i.get("type") == "function_call_output"][-1]["output"])


def run_turn(agent: fx.Agent, tmp_path: Path, prompt: str) -> tuple[str, list[fx.EventRecord]]:
    async def main() -> tuple[str, list[fx.EventRecord]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("t-1")
            text = await session.run(prompt)
            return text, await session.events()

    return asyncio.run(main())


def test_policies_come_from_the_decorator_and_default_to_unsafe(tmp_path: Path) -> None:
    agent = build(tmp_path)
    assert {t.name: t.policy for t in agent.tools} == {
        "read_status": "safe",
        "record_note": "idempotent",
        "deploy": "unsafe",
    }
    schema = agent.tool("deploy").json_schema()  # type: ignore[union-attr]
    assert schema["properties"] == {"release": {"title": "Release", "type": "string"}}


def test_a_turn_sends_the_instructions_settings_and_tools_and_keys_each_call(
    tmp_path: Path,
) -> None:
    keys: list[tuple[str, str, object]] = []

    @function_tool
    def deploy(ctx: ToolContext[str], release: str) -> str:
        """Deploy a release."""
        keys.append((tool_context(ctx).execution_id, ctx.tool_call_id, ctx.context))
        return f"{release} by {ctx.context}"

    model = scripted(
        [function_call("deploy", {"release": "r2"}, call_id="c1")], [assistant_message("done")]
    )
    sdk = Agent(
        name="plain",
        instructions="Be careful.",
        model=model,
        model_settings=ModelSettings(temperature=0.2),
        tools=[deploy],
    )
    agent = durable_agent(sdk, context="ops-bot", stream=False, replay={"deploy": "unsafe"})
    text, _ = run_turn(agent, tmp_path, "deploy r2")
    assert text == "done"
    first, second = model.calls
    assert (first.system_instructions, first.model_settings.temperature) == ("Be careful.", 0.2)
    assert [t.name for t in first.tools] == ["deploy"] and first.tools[0] is deploy
    assert not first.streamed
    ((execution_id, call_id, context),) = keys
    assert execution_id == call_id and execution_id and context == "ops-bot"
    assert last_output(second) == "r2 by ops-bot"
    # The history the model read was rebuilt from the journal: the call under its own id.
    assert [i.get("type") or i.get("role") for i in second.input] == [
        "user",
        "function_call",
        "function_call_output",
    ]


def test_streamed_text_reaches_the_event_log_and_bad_arguments_reach_the_model(
    tmp_path: Path,
) -> None:
    answer = "All four regions are healthy, nothing to deploy today."
    ran: list[str] = []

    @function_tool
    def read_status(region: str) -> str:
        """Read a region's status."""
        ran.append(region)
        return f"{region}: healthy"

    model = scripted(
        [function_call("read_status", {"zone": 1}, call_id="c1")], [assistant_message(answer)]
    )
    sdk = Agent(name="streamer", model=model, tools=[replay("safe")(read_status)])
    agent = durable_agent(sdk, durability=fx.Durability(partial_text_every_s=0.0))
    text, events = run_turn(agent, tmp_path, "status?")
    partials = [str(e.data["text"]) for e in events if e.type == "model.partial"]
    assert text == answer and partials and "".join(partials) == answer
    assert all(call.streamed for call in model.calls)
    # The SDK validated the arguments against its schema (the body did not run) and told the
    # model, with its own (redacted) failure message.
    assert ran == []
    assert (
        last_output(model.calls[1]) == "An error occurred while running the tool. Please try again."
    )


def test_a_transient_sdk_model_error_is_retried_durably(tmp_path: Path) -> None:
    down = openai.APIConnectionError(request=httpx.Request("POST", "https://api.invalid/v1"))
    model = ScriptedModel([down, [assistant_message("back")]])
    retries = fx.ModelRetries(base_s=0.01, max_s=0.01)
    agent = durable_agent(
        Agent(name="retried", model=model), durability=fx.Durability(model_retries=retries)
    )
    text, events = run_turn(agent, tmp_path, "hello")
    assert text == "back" and len(model.calls) == 2
    (error,) = [e.data for e in events if e.type == "model.error"]  # one, retried
    assert "Connection error" in str(error), error


@pytest.mark.parametrize(
    ("policy", "status"), [("unsafe", "outcome_unknown"), ("safe", "cancelled")]
)
def test_the_sdk_tool_timeout_is_a_call_cut_short_settled_by_its_policy(
    tmp_path: Path, policy: fx.ReplayPolicy, status: str
) -> None:
    @function_tool(timeout=0.2)
    async def migrate() -> str:
        """Migrate."""
        await asyncio.sleep(30)
        return "migrated"

    model = scripted([function_call("migrate", {}, call_id="c1")], [assistant_message("stopped")])
    agent = durable_agent(
        Agent(name="slow", model=model, tools=[migrate]), stream=False, replay={"migrate": policy}
    )

    async def main() -> list[fx.ToolTask]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("slow-1")
            assert await session.run("migrate") == "stopped"
            ids = [e.data["task"] for e in await session.events() if e.type == "tool.started"]
            return [t for t in [await session.task(str(i)) for i in ids] if t is not None]

    (task,) = asyncio.run(main())
    assert task.status == status
    shown = last_output(model.calls[1])
    assert shown.startswith("migrate timed out after "), shown
    assert ("may or may not have completed" in shown) == (status == "outcome_unknown")


def test_a_needs_approval_tool_asks_a_person_and_runs_only_when_allowed(tmp_path: Path) -> None:
    wiped: list[str] = []

    @function_tool(needs_approval=True)
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        wiped.append(disk)
        return f"{disk} wiped"

    def reply(call: ModelCall) -> list[Any]:
        return [assistant_message(f"result: {last_output(call)}")]

    steps: list[Any] = []
    for disk in ("d1", "d2"):
        steps += [[function_call("wipe", {"disk": disk}, call_id=disk)], ModelStep.respond(reply)]
    model = ScriptedModel(steps)
    agent = durable_agent(Agent(name="careful", model=model, tools=[wipe]), stream=False)

    async def asked(session: fx.SessionHandle, prompt: str, answer: fx.Answer) -> tuple[str, str]:
        sub = await session.submit(prompt)
        question = await session.question()
        while question is None:  # the turn waits for the answer, durably, holding no lease
            await asyncio.sleep(0.02)
            question = await session.question()
        ran_before = list(wiped)
        await session.answer(answer)
        done = await session.wait(sub.id, timeout=30)
        assert wiped[: len(ran_before)] == ran_before  # nothing ran before the answer
        return question.question, done.result or ""

    async def main() -> list[tuple[str, str]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("careful-1")
            allowed = await asked(session, "wipe d1", fx.allow())
            return [allowed, await asked(session, "wipe d2", fx.deny("not today"))]

    assert asyncio.run(main()) == [
        ('Allow wipe with {"disk":"d1"}?', "result: d1 wiped"),
        ('Allow wipe with {"disk":"d2"}?', "result: denied: not today"),
    ]
    assert wiped == ["d1"]  # the denied call never ran


def test_a_handoff_runs_the_other_agent_in_a_child_session_and_answers_back(
    tmp_path: Path,
) -> None:
    refunded: list[tuple[str, str]] = []

    @replay("idempotent")
    @function_tool
    def refund(ctx: ToolContext[None], order: str) -> str:
        """Refund an order (deduplicated on the call's key)."""
        refunded.append((order, ctx.tool_call_id))
        return f"order {order} refunded"

    billing_model = scripted(
        [function_call("refund", {"order": "7"}, call_id="b1")], [assistant_message("refunded 7")]
    )
    billing = Agent(
        name="billing",
        handoff_description="Refunds and invoices.",
        model=billing_model,
        tools=[refund],
    )
    triage_model = scripted(
        [function_call("transfer_to_billing", {"task": "refund order 7"}, call_id="t1")],
        [assistant_message("billing says: refunded 7")],
    )
    agent = durable_agent(Agent(name="triage", model=triage_model, handoffs=[billing]))
    assert [t.name for t in agent.tools] == ["transfer_to_billing"]

    async def main() -> tuple[str, Any, list[fx.ChatMessage]]:
        # Runtime([triage]) brings billing along, as for any subagent.
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            text = await rt.session("t-1").run("I want my money back for order 7")
            (call,) = [
                t
                for sub in rt.journal.read(lambda v: list(v.submissions("t-1")))
                for t in rt.journal.read(lambda v, s=sub: list(v.tool_tasks(s.id)))
            ]
            child_id = child_session_id("t-1", call.execution_id)
            child = rt.journal.read(lambda v: v.get_session(child_id))
            history = await rt.session(child_id, agent="billing").history()
            return text, (call, child, child_id), history

    text, (call, child, child_id), history = asyncio.run(main())
    assert text == "billing says: refunded 7"
    # The SDK model saw the handoff under the SDK's own name and description, asking a task.
    (shown,) = triage_model.calls[0].tools
    assert (shown.name, shown.description) == (
        "transfer_to_billing",
        "Handoff to the billing agent to handle the request. Refunds and invoices.",
    )
    assert shown.params_json_schema["required"] == ["task"]
    # The call ran billing in a child session of its own, whose answer triage read.
    assert (call.tool, call.status) == ("transfer_to_billing", "completed")
    assert call.child_session == child_id
    assert (child.agent, child.parent_session) == ("billing", "t-1")
    assert history[0].text == "refund order 7"
    assert last_output(triage_model.calls[1]) == "refunded 7"
    assert [o for o, _ in refunded] == ["7"]  # the child's own tool, journaled in the child


def test_a_handoff_back_up_the_chain_is_refused() -> None:
    model = scripted()
    triage = Agent(name="triage", model=model)
    billing = Agent(name="billing", model=model, handoffs=[triage])
    triage.handoffs = [billing]
    chain = "goes back up the chain triage -> billing -> triage"
    with pytest.raises(fx.ConfigurationError, match=chain):
        durable_agent(triage)
    with pytest.raises(fx.ConfigurationError, match=chain):  # named apart: the same chain
        durable_agent(triage, name="front-desk")


def test_what_the_adapter_does_not_make_durable_is_refused_at_build_time() -> None:
    class Plan(BaseModel):
        steps: list[str]

    async def check(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        return True

    @function_tool
    def noop() -> str:
        """Nothing."""
        return ""

    model = scripted()
    refused = {
        "is a handoff\\(...\\) object": Agent(
            name="a", model=model, handoffs=[handoff(Agent(name="b", model=model))]
        ),
        "output_type": Agent(name="a", model=model, output_type=Plan),
        "is a WebSearchTool": Agent(name="a", model=model, tools=[WebSearchTool()]),
        "dynamic instructions": Agent(name="a", model=model, instructions=lambda c, a: "x"),
        "tool_use_behavior": Agent(name="a", model=model, tool_use_behavior="stop_on_first_tool"),
        "needs_approval is a function": Agent(
            name="a", model=model, tools=[function_tool(noop.__wrapped__, needs_approval=check)]
        ),
    }
    for message, sdk in refused.items():
        with pytest.raises(fx.ConfigurationError, match=message):
            durable_agent(sdk)
    with pytest.raises(fx.ConfigurationError, match="lacks: \\['nope'\\]"):
        durable_agent(Agent(name="c", model=model), replay={"nope": "safe"})
    with pytest.raises(fx.ConfigurationError, match="replay policy must be one of"):
        replay("sometimes")  # type: ignore[arg-type]
    disabled = function_tool(noop.__wrapped__, is_enabled=False)
    assert durable_agent(Agent(name="d", model=model, tools=[disabled])).tools == ()


def test_tool_context_outside_fxdurable_says_so() -> None:
    ctx = ToolContext(context=None, tool_name="deploy", tool_call_id="c1", tool_arguments="{}")
    with pytest.raises(fx.ConfigurationError, match="outside an fxdurable turn"):
        tool_context(ctx)
