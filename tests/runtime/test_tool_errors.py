"""Bad tool input, unknown tools, raising tools, hooks and tool timeouts: the model reads why."""

from __future__ import annotations

import asyncio

import pydantic
from fxrt_support import FAST, check_invariants, event_types, fresh_store, read, run, tasks

import fxdurable as fx
from fxdurable.runtime.decide import unknown_message


class Deploy(pydantic.BaseModel):
    version: str


def test_invalid_arguments_and_unknown_tools_become_readable_errors(tmp_path):
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy a version."
        executed.append(inp.version)
        return f"deployed {inp.version}"

    model = fx.ScriptedModel(
        [
            fx.reply(
                "trying",
                fx.ToolCallRequest(name="deploy", arguments='{"version": "1.4"'),  # bad JSON
                fx.call("deploy"),  # missing field
                fx.call("deploy", version=["not", "a", "string"]),  # wrong type
                fx.call("nope", x=1),  # unknown tool
                fx.call("deploy", version="2.0"),  # fine
            ),
            fx.reply("done"),
        ]
    )
    agent = fx.Agent("eng", model, tools=[deploy])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            assert await s.run("ship", timeout=10) == "done"
            assert executed == ["2.0"]
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            recorded = tasks(rt, sub.id)
            assert [t.status.value for t in recorded] == [
                "failed",
                "failed",
                "failed",
                "failed",
                "completed",
            ]
            assert [t.runs for t in recorded] == [0, 0, 0, 0, 1]  # never executed
            assert recorded[3].policy == "safe"  # an unknown tool is never executed

            seen = [m for m in model.requests[1].messages if m.role == "tool"]
            assert [m.tool_call_id for m in seen] == [t.id for t in recorded]
            assert "not valid JSON" in seen[0].text
            assert "invalid arguments for deploy" in seen[1].text
            assert "version" in seen[1].text and "required" in seen[1].text.lower()
            assert "invalid arguments for deploy" in seen[2].text
            assert "valid string" in seen[2].text
            assert "unknown tool 'nope'" in seen[3].text
            assert "deploy" in seen[3].text  # names what is available
            assert seen[4].text == "deployed 2.0"
            assert [m.text for m in seen] == [t.result for t in recorded]

            types = event_types(rt, "s1")
            assert types.count("tool.failed") == 4
            assert types.count("tool.started") == 1
            await check_invariants(rt, "s1")

    run(main())


def test_raising_tool_fails_the_task_not_the_turn(tmp_path):
    @fx.tool
    def failing(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Fails."
        raise RuntimeError(f"boom {inp.version}")

    @fx.tool
    async def afailing(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Fails too."
        raise ValueError("async boom")

    model = fx.ScriptedModel(
        [
            fx.reply("", fx.call("failing", version="1"), fx.call("afailing", version="2")),
            fx.reply("recovered from errors"),
        ]
    )
    agent = fx.Agent("eng", model, tools=[failing, afailing])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            assert await s.run("go", timeout=10) == "recovered from errors"
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            assert sub.status.value == "completed"
            recorded = tasks(rt, sub.id)
            assert [t.status.value for t in recorded] == ["failed", "failed"]
            assert [t.runs for t in recorded] == [1, 1]
            seen = [m.text for m in model.requests[1].messages if m.role == "tool"]
            assert seen == ["RuntimeError: boom 1", "ValueError: async boom"]
            assert event_types(rt, "s1").count("tool.failed") == 2
            await check_invariants(rt, "s1")

    run(main())


def test_before_tool_denial_records_no_intent(tmp_path):
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.version)
        return "ok"

    asked: list[tuple[str, str]] = []

    async def before_tool(name: str, arguments: str) -> str | None:
        asked.append((name, arguments))
        return "production is frozen" if "prod" in arguments else None

    model = fx.ScriptedModel(
        [
            fx.reply("", fx.call("deploy", version="prod"), fx.call("deploy", version="staging")),
            fx.reply("ok"),
        ]
    )
    agent = fx.Agent("eng", model, tools=[deploy], before_tool=before_tool)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run("go", timeout=10) == "ok"
            assert executed == ["staging"]
            assert [a[0] for a in asked] == ["deploy", "deploy"]
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            denied, allowed = tasks(rt, sub.id)
            assert denied.status.value == "failed" and denied.runs == 0
            assert denied.result == "denied: production is frozen"
            assert allowed.status.value == "completed"
            seen = [m.text for m in model.requests[1].messages if m.role == "tool"]
            assert seen[0] == "denied: production is frozen"
            await check_invariants(rt, "s1")

    run(main())


def test_tool_timeout_safe_cancelled_unsafe_unknown(tmp_path):
    async def slow(inp: Deploy, ctx: fx.ToolContext) -> str:
        await asyncio.sleep(5)
        return "never"

    read_slowly = fx.define_tool(
        "read_slowly", description="slow read", input_model=Deploy, execute=slow, timeout_s=0.1
    )
    write_slowly = fx.define_tool(
        "write_slowly",
        description="slow write",
        input_model=Deploy,
        execute=slow,
        replay="unsafe",
        timeout_s=0.1,
    )
    model = fx.ScriptedModel(
        [
            fx.reply("", fx.call("read_slowly", version="1"), fx.call("write_slowly", version="1")),
            fx.reply("gave up"),
        ]
    )
    agent = fx.Agent("eng", model, tools=[read_slowly, write_slowly])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run("go", timeout=10) == "gave up"
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            r, w = tasks(rt, sub.id)
            assert r.status.value == "cancelled"
            assert "timed out" in (r.result or "")
            assert w.status.value == "outcome_unknown"
            assert unknown_message("write_slowly") in (w.result or "")
            assert "tool.outcome_unknown" in event_types(rt, "s1")
            await check_invariants(rt, "s1")

    run(main())
