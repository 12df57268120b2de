"""fx.mcp_tools against a real MCP server (tests/mcp/mcp_server.py, the SDK's FastMCP) over
stdio, in this process: policies from annotations, the ``_meta`` ids the server sees, an
``isError`` result, a tool the server no longer offers, the lazy import."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fxdurable as fx
from fxdurable.errors import ConfigurationError, MCPConnectError
from tests.mcp.mcp_support import REPO, SERVER, kill, lines


def stdio(world: Path, **kwargs: float) -> fx.MCPServer:
    return fx.MCPServer.stdio(sys.executable, [str(SERVER), str(world)], **kwargs)


def run_turn(world: Path, tools: list[fx.Tool], *calls: fx.ToolCallRequest) -> list[fx.EventRecord]:
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("ops", model, tools=tools)

    async def main() -> list[fx.EventRecord]:
        async with fx.Runtime([agent], store=f"sqlite:///{world}/s.db") as rt:
            session = rt.session("s")
            assert await session.run("go") == "done"
            return [e for e in await session.events() if e.type.startswith("tool.")]

    return asyncio.run(main())


def outcomes(events: list[fx.EventRecord]) -> dict[str, tuple[str, str]]:
    return {e.data["tool"]: (e.type, e.data["result"]) for e in events if "result" in e.data}


def test_policies_come_from_the_annotations_and_can_be_overridden(world: Path) -> None:
    tools = {t.name: t for t in fx.mcp_tools(stdio(world))}
    policies = {name: t.policy for name, t in tools.items()}
    assert policies == {
        "broken": "safe",
        "deploy": "unsafe",  # destructiveHint
        "read_status": "safe",  # readOnlyHint
        "restart": "unsafe",  # no hint at all
        "set_flag": "idempotent",  # idempotentHint
        "whoami": "safe",
    }
    # The schema the model sees is the server's own.
    assert tools["deploy"].json_schema()["required"] == ["version"]
    overridden = fx.mcp_tools(stdio(world), policies={"restart": "idempotent"}, prefix="w_")
    assert {t.name: t.policy for t in overridden}["w_restart"] == "idempotent"
    with pytest.raises(ConfigurationError, match="offers no tool 'restrat'"):
        fx.mcp_tools(stdio(world), policies={"restrat": "safe"})


def test_each_call_carries_its_execution_id_in_meta_and_errors_reach_the_model(
    world: Path,
) -> None:
    tools = fx.mcp_tools(stdio(world))
    events = run_turn(
        world,
        tools,
        fx.call("whoami"),
        fx.call("deploy", version="v1"),
        fx.call("broken"),
        fx.call("deploy", version=3),  # not a string: refused before any call is sent
    )
    started = {e.data["tool"]: e.data["execution_id"] for e in events if e.type == "tool.started"}
    done = outcomes(events)
    meta = json.loads(done["whoami"][1])
    assert meta["fxdurable/execution_id"] == started["whoami"]
    assert meta["fxdurable/session_id"] == "s" and meta["fxdurable/attempt"] == 1
    # The server saw the same id as the journal's for the deploy, and deployed once.
    assert lines(world, "effects.log") == [f"deploy v1 {started['deploy']}"]
    failed = [e.data["result"] for e in events if e.type == "tool.failed"]
    assert any(r.startswith("MCPToolError:") and "the disk is on fire" in r for r in failed)
    assert any("version: 3 is not of type 'string'" in r for r in failed), failed


def test_a_tool_the_restarted_server_no_longer_offers_fails_naming_it(world: Path) -> None:
    tools = fx.mcp_tools(stdio(world))
    # The server is redeployed without deploy: this process reconnects and lists again.
    (world / "hidden").write_text("deploy\n")
    kill(int((world / "server.pid").read_text()))
    events = run_turn(world, tools, fx.call("deploy", version="v9"))
    kind, result = outcomes(events)["deploy"]
    assert kind == "tool.failed"
    assert "MCPToolChangedError" in result and "no longer offers the tool 'deploy'" in result
    assert lines(world, "effects.log") == []  # never sent


def test_a_tool_whose_schema_changed_on_a_redeploy_fails_naming_it_and_the_rest_work(
    world: Path,
) -> None:
    tools = fx.mcp_tools(stdio(world))
    first = int((world / "server.pid").read_text())
    # The server is redeployed with deploy's input schema changed (a region added): a call
    # the model shaped for the list this process took would reach a tool it never saw.
    (world / "changed").touch()
    kill(first)
    events = run_turn(world, tools, fx.call("deploy", version="v9"), fx.call("whoami"))
    assert int((world / "server.pid").read_text()) != first  # reconnected to the new one
    done = outcomes(events)
    kind, result = done["deploy"]
    assert kind == "tool.failed" and "MCPToolChangedError" in result, result
    assert "changed the input schema of the tool 'deploy'" in result, result
    assert lines(world, "effects.log") == []  # never sent
    assert done["whoami"][0] == "tool.completed"  # the unchanged tools still work
    # The list is this process's, taken when the tools were built (and again on reconnect):
    # restart the worker to take the new one, with deploy's new schema.
    fresh = {t.name: t for t in fx.mcp_tools(stdio(world))}
    assert fresh["deploy"].json_schema()["required"] == ["version", "region"]


def test_an_unreachable_server_is_a_connect_error_within_its_timeout(world: Path) -> None:
    server = fx.MCPServer.stdio(sys.executable, ["-c", "pass"], connect_timeout_s=1)
    with pytest.raises(MCPConnectError, match="within 1s"):
        fx.mcp_tools(server)


def test_import_fxdurable_does_not_import_mcp_and_a_missing_sdk_names_the_extra() -> None:
    code = (
        "import sys, fxdurable as fx\n"
        "fx.mcp_tools, fx.MCPServer\n"
        "assert 'mcp' not in sys.modules, 'import fxdurable loaded mcp'\n"
        "sys.modules['mcp'] = None  # as if the extra were not installed\n"
        "try:\n"
        "    fx.mcp_tools('http://127.0.0.1:9/mcp')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "pip install 'fxdurable[mcp]'" in done.stdout, done.stdout + done.stderr


def test_a_string_that_is_not_a_url_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"MCPServer\.stdio"):
        fx.mcp_tools("npx some-server")


def test_a_tool_raising_outcome_unknown_is_settled_by_its_policy(tmp_path: Path) -> None:
    """The runtime's side of MCPServerLostError: any tool may raise ToolOutcomeUnknownError."""
    import pydantic

    from fxdurable.errors import ToolOutcomeUnknownError

    class Empty(pydantic.BaseModel):
        pass

    def lost(inp: Empty, ctx: fx.ToolContext) -> str:
        raise ToolOutcomeUnknownError("the line went dead")

    tools = [
        fx.define_tool(n, description=n, input_model=Empty, execute=lost, replay=p)
        for n, p in (("push", "unsafe"), ("peek", "safe"))
    ]
    done = outcomes(run_turn(tmp_path, tools, fx.call("push"), fx.call("peek")))
    assert done["push"][0] == "tool.outcome_unknown"
    assert "the line went dead" in done["push"][1] and "may or may not" in done["push"][1]
    assert done["peek"] == ("tool.cancelled", "peek was cut short (the line went dead)")


def test_a_parallel_batch_shares_the_connection(world: Path) -> None:
    """Safe and idempotent calls of one response run at once on the process's connection."""
    tools = fx.mcp_tools(stdio(world))
    reads = [fx.call("read_status", service=s) for s in ("eu", "us", "ap")]
    events = run_turn(world, tools, *reads, fx.call("set_flag", name="beta", value=True))
    done = [e for e in events if e.type == "tool.completed"]
    assert sorted(e.data["result"] for e in done) == ["ap: ok", "beta=True", "eu: ok", "us: ok"]
    assert len(lines(world, "flags.log")) == 1


def test_no_answer_within_the_call_timeout_leaves_an_unsafe_call_unknown(world: Path) -> None:
    (world / "block-deploy").touch()  # deploys, then never answers
    tools = fx.mcp_tools(stdio(world, call_timeout_s=1))
    kind, result = outcomes(run_turn(world, tools, fx.call("deploy", version="v3")))["deploy"]
    assert kind == "tool.outcome_unknown", result
    assert "no answer from the MCP server" in result and "within 1s" in result
    assert len(lines(world, "effects.log")) == 1  # it happened, and was not sent again
