"""The tool list is pinned per fxdurable session: a redeploy of the MCP server that changes a
tool the session already used (its input schema, or the annotations that give its policy) fails
that session's calls of it naming the tool, on a worker that listed the new server; the other
tools and new sessions carry on. An unchanged list costs no server round trip and, once
pinned, no store write. Each "worker" here is a runtime of its own, after this process's
connections were closed (a new worker lists the server once, when its agent is built)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import fxdurable as fx
from fxdurable.tools.mcp import STATE_PREFIX
from fxdurable.tools.mcp_connection import close_connections
from tests.mcp.mcp_support import SERVER, kill, lines


def new_worker(world: Path) -> list[fx.Tool]:
    """A redeployed worker: its own connection (a new server process), its own listing."""
    if (world / "server.pid").exists():
        kill(int((world / "server.pid").read_text()))
    close_connections()
    return fx.mcp_tools(fx.MCPServer.stdio(sys.executable, [str(SERVER), str(world)]))


def turn(
    world: Path, tools: list[fx.Tool], session_id: str, *calls: fx.ToolCallRequest
) -> tuple[dict[str, tuple[str, str]], list[fx.EventRecord], dict[str, object]]:
    """One turn of ``session_id`` making ``calls``: each tool's (event, result), the turn's
    events, the session's state after it."""
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("ops", model, tools=tools)

    async def main() -> tuple[list[fx.EventRecord], dict[str, object]]:
        async with fx.Runtime([agent], store=f"sqlite:///{world}/s.db") as rt:
            session = rt.session(session_id)
            before = len(await session.events())
            assert await session.run("go") == "done"
            return (await session.events())[before:], await session.state()

    events, state = asyncio.run(main())
    done = {e.data["tool"]: (e.type, e.data["result"]) for e in events if "result" in e.data}
    return done, events, state


def test_a_redeploy_that_changes_a_used_tool_fails_its_calls_in_that_session(
    world: Path,
) -> None:
    tools = new_worker(world)
    done, _, state = turn(world, tools, "s", fx.call("deploy", version="v1"))
    assert done["deploy"][0] == "tool.completed"
    # The first completed call pinned the whole list, one key per tool.
    pinned = {k: v for k, v in state.items() if k.startswith(STATE_PREFIX)}
    assert set(pinned) == {STATE_PREFIX + t.name for t in tools}
    assert str(pinned[STATE_PREFIX + "deploy"]).startswith("unsafe ")

    # The server is redeployed with deploy's input schema changed, and so is the worker: its
    # agent is built from the new list, so the model is shown (and calls) the new deploy.
    (world / "changed").touch()
    tools = new_worker(world)
    done, _, _ = turn(
        world, tools, "s", fx.call("deploy", version="v2", region="eu"), fx.call("whoami")
    )
    kind, result = done["deploy"]
    assert kind == "tool.failed" and result.startswith("MCPToolChangedError:"), result
    assert "changed the input schema of the tool 'deploy'" in result, result
    assert done["whoami"][0] == "tool.completed"  # the tools that did not change still work
    assert lines(world, "effects.log") == [lines(world, "effects.log")[0]]  # v2 never sent
    assert lines(world, "effects.log")[0].startswith("deploy v1 ")

    # A new session pins the list as it is now: its deploy runs, with the region.
    done, _, _ = turn(world, tools, "t", fx.call("deploy", version="v2", region="eu"))
    assert done["deploy"] == ("tool.completed", "deployed v2 to eu")
    assert len(lines(world, "effects.log")) == 2


def test_changed_annotations_fail_the_tool_naming_the_policies(world: Path) -> None:
    tools = new_worker(world)
    done, _, _ = turn(world, tools, "s", fx.call("set_flag", name="beta", value=True))
    assert done["set_flag"][0] == "tool.completed"
    # Redeployed without idempotentHint: set_flag is unsafe now, and the session relied on it
    # being idempotent (a re-run after a crash would not be deduplicated any more).
    (world / "reannotated").touch()
    tools = new_worker(world)
    assert {t.name: t.policy for t in tools}["set_flag"] == "unsafe"
    done, _, _ = turn(world, tools, "s", fx.call("set_flag", name="beta", value=False))
    kind, result = done["set_flag"]
    assert kind == "tool.failed", result
    assert "changed the annotations of the tool 'set_flag'" in result, result
    assert "they give 'unsafe', not 'idempotent'" in result, result
    assert [line.split()[0] for line in lines(world, "calls.log")] == ["set_flag"]  # not sent


def test_an_unchanged_list_costs_no_round_trip_and_no_write_once_pinned(world: Path) -> None:
    tools = new_worker(world)
    turn(world, tools, "s", fx.call("read_status", service="api"))
    assert lines(world, "lists.log") == ["tools/list"]  # the listing when the agent was built
    # A later turn on another worker, with the same list: its one listing, the calls, and
    # no state written (the pins are there already).
    tools = new_worker(world)
    done, events, state = turn(
        world, tools, "s", fx.call("read_status", service="db"), fx.call("deploy", version="v3")
    )
    assert {kind for kind, _ in done.values()} == {"tool.completed"}
    assert lines(world, "lists.log") == ["tools/list", "tools/list"]
    assert [e for e in events if e.type == "state.changed"] == []
    assert len([k for k in state if k.startswith(STATE_PREFIX)]) == len(tools)


def test_a_tool_the_server_added_is_pinned_by_its_first_use(world: Path) -> None:
    (world / "hidden").write_text("restart\n")
    tools = new_worker(world)
    _, _, state = turn(world, tools, "s", fx.call("whoami"))
    assert STATE_PREFIX + "restart" not in state
    (world / "hidden").unlink()  # the redeployed server offers restart too
    tools = new_worker(world)
    done, events, state = turn(world, tools, "s", fx.call("restart", service="api"))
    assert done["restart"] == ("tool.completed", "restarted api")
    changed = [e.data["set"] for e in events if e.type == "state.changed"]
    assert changed == [{STATE_PREFIX + "restart": state[STATE_PREFIX + "restart"]}]
