"""MCP tools through each adapter: ``durable_agent(..., tools=fx.mcp_tools(server))`` (and
``DurableMiddleware(tools=...)`` for a ``create_agent`` graph), the framework's model calling
the tools of a real MCP server process, the worker SIGKILLed in the middle of a call.

The server is this file run as ``python test_adapter_mcp_tools.py serve WORLD`` (FastMCP over
stdio, started by the worker through ``fx.mcp_tools``): the crash matrix's three tools
(``pydai_agent.py``'s outside world, checked by ``pydai_checks.py``), their replay policies
from their MCP annotations alone, their idempotency key the ``_meta`` execution id:

- ``read_status`` (``readOnlyHint``: ``safe``), each run a line in ``reads.log``;
- ``record_note`` (``idempotentHint``): ``note <key>`` to ``notes.log`` unless there, each run
  to ``calls.log``;
- ``deploy`` (``destructiveHint``: ``unsafe``): ``deploy <key>`` to ``effects.log``.

A tool blocks after its effect, before its answer, while ``WORLD/block-<tool>`` exists and
``WORLD/blocked-<tool>`` does not (it writes its pid there; the MCP tests' switch,
``tests/mcp/mcp_support.blocked_pid``). The framework agents have no tools of their own: every
call the model makes is an MCP call.

Run as ``python test_adapter_mcp_tools.py --framework NAME --store URL --dir WORLD``, this file
is the driver: ``pydai_driver.py``'s run to rest with that framework's agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import test_pydantic_ai_crash as pydai_crash
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations
from pydai_checks import UNKNOWN, assert_checked, lines

import fxdurable as fx
from tests.mcp.mcp_support import blocked_pid, free_port, kill, start_http_server

HERE = Path(__file__).resolve()
ADAPTERS = ("pydantic-ai", "openai-agents", "langchain", "langchain-graph")
INSTRUCTIONS = "You deploy releases carefully."


# -- the MCP server -----------------------------------------------------------------------------


def serve(world: Path, http: int | None = None) -> None:
    """Over stdio, or with ``http`` streamable HTTP at ``http://127.0.0.1:<http>/mcp``."""
    server = FastMCP("world", host="127.0.0.1", port=http or 8000, log_level="WARNING")

    def log(name: str, line: str) -> None:
        with (world / name).open("a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def key_of(ctx: Context) -> str:  # type: ignore[type-arg]
        meta = ctx.request_context.meta
        return str((meta.model_extra or {}).get("fxdurable/execution_id") if meta else None)

    async def maybe_block(tool: str) -> None:
        if (world / f"block-{tool}").exists() and not (world / f"blocked-{tool}").exists():
            (world / f"blocked-{tool}").write_text(str(os.getpid()))
            await anyio.sleep(3600)  # until the test kills this server

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def read_status(region: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Read a region's status."""
        log("reads.log", key_of(ctx))
        await maybe_block("read_status")
        return f"{region}: healthy"

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    async def record_note(text: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Record a note in the change log (deduplicated on the call's key)."""
        key = key_of(ctx)
        log("calls.log", f"record_note {key}")
        if f"note {key}" not in lines(world / "notes.log"):
            log("notes.log", f"note {key}")
        return "noted"

    @server.tool(annotations=ToolAnnotations(destructiveHint=True))
    async def deploy(release: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Deploy a release."""
        key = key_of(ctx)
        log("effects.log", f"deploy {key}")
        await maybe_block("deploy")
        return f"release {release} deployed ({key})"

    server.run("stdio" if http is None else "streamable-http")


# -- each framework's agent, its tools the server's ---------------------------------------------


def mcp_tools(world: Path, http: int | None = None) -> list[fx.Tool]:
    if http is not None:  # a server of its own, which the test starts and kills
        return fx.mcp_tools(fx.MCPServer.http(f"http://127.0.0.1:{http}/mcp", call_timeout_s=20))
    # The server imports this file's imports: the repository on its path (the SDK starts it
    # with a minimal environment of its own).
    server = fx.MCPServer.stdio(
        sys.executable,
        [str(HERE), "serve", str(world)],
        env={"PYTHONPATH": str(HERE.parents[2])},
        connect_timeout_s=15,
    )
    return fx.mcp_tools(server)


def build(framework: str, world: Path, http: int | None = None) -> fx.Agent:
    """``framework``'s agent of the crash matrix (its model, from the adapter's own tests)
    with no tools of its own and the MCP server's added (over HTTP on port ``http``)."""
    tools = mcp_tools(world, http)
    if framework == "pydantic-ai":
        from pydai_agent import function_model
        from pydantic_ai import Agent

        from fxdurable.adapters import pydantic_ai

        ops = Agent(function_model(world), name="pydai-ops")
        return pydantic_ai.durable_agent(ops, instructions=INSTRUCTIONS, tools=tools)
    if framework == "openai-agents":
        from test_openai_agents_world import sdk_agent

        from fxdurable.adapters import openai_agents

        return openai_agents.durable_agent(sdk_agent(world).clone(tools=[]), tools=tools)
    from test_langchain_agent import world_parts

    from fxdurable.adapters import langchain

    model, _ = world_parts(world)
    if framework == "langchain":
        return langchain.durable_agent(model, tools, name="lc-ops", system_prompt=INSTRUCTIONS)
    from langchain.agents import create_agent

    durable = langchain.DurableMiddleware(tools=tools)
    graph = create_agent(model, [], middleware=[durable], system_prompt=INSTRUCTIONS)
    return durable.agent(graph, name="lc-ops")


# -- the tests ----------------------------------------------------------------------------------

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def killed_mid(tool: str) -> pydai_crash.Killer:
    """SIGKILL the worker while the server's ``tool`` is blocked mid-call (its effect done, its
    answer not sent), then the server it left behind."""

    def kill_mid_call(worker: subprocess.Popen[str], world: Path) -> None:
        server = blocked_pid(world, tool, worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        kill(server)

    return kill_mid_call


# (tool blocked when the worker is killed, deploys the world saw, the model told "unknown")
CASES = [("deploy", 1, True), ("read_status", 1, False)]


@pytest.mark.parametrize("framework", ADAPTERS)
@pytest.mark.parametrize(("tool", "deploys", "unknown"), CASES, ids=[c[0] for c in CASES])
def test_an_mcp_call_cut_by_a_sigkill_is_settled_by_its_annotations(
    tmp_path: Path, framework: str, tool: str, deploys: int, unknown: bool
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    (world / f"block-{tool}").touch()
    pydai_crash.kill_and_recover(
        tmp_path,
        f"mcp.mid-call:{tool}",
        deploys,
        unknown,
        driver=HERE,
        framework=framework.removesuffix("-graph"),
        argv=["--framework", framework],
        kill=killed_mid(tool),
    )
    reads = lines(world / "reads.log")
    if tool == "read_status":
        # The safe read ran again after the kill, with the same execution id; then the
        # follow-up's read.
        assert len(reads) == 3 and reads[0] == reads[1] != reads[2], reads
    else:
        assert len(reads) == 2 and reads[0] != reads[1], reads  # the turn's, the follow-up's


@pytest.mark.parametrize("tool", ["deploy", "read_status"])
def test_a_streamable_http_server_killed_mid_call_is_settled_by_the_annotations(
    tmp_path: Path, tool: str
) -> None:
    """pydantic-ai's model calling a streamable-HTTP MCP server, the *server* SIGKILLed while
    ``tool`` is blocked mid-call (its effect done, its answer not sent), the worker alive:
    the unsafe deploy is ``outcome_unknown`` (the model told so, its blind repeat refused),
    the safe read runs again once, under the same ``_meta`` execution id, on the server
    started again on the same port."""
    store, world, port = f"sqlite:///{tmp_path}/pydai.db", tmp_path / "world", free_port()
    world.mkdir()
    (world / f"block-{tool}").touch()
    command = [str(HERE), "serve", str(world), "--http", str(port)]
    servers = [start_http_server(world, port, command)]
    argv = ["--framework", "pydantic-ai", "--http", str(port)]
    worker = pydai_crash.start(HERE, store, world, argv=argv)
    try:
        kill(blocked_pid(world, tool, worker))
        if tool == "read_status":  # a redeployed server, where the re-run finds it
            servers.append(start_http_server(world, port, command))
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0 and "Traceback" not in err, (worker.returncode, out, err)
        done = pydai_crash.outcome(out)
        assert done["status"] == "completed", done
        unknown = tool == "deploy"
        assert len(lines(world / "effects.log")) == 1  # the deploy ran once, never re-run
        last = [(n, t) for n, t in json.loads(lines(world / "model.log")[-1])["shown"]]
        deploys = [t for n, t in last if n == "deploy"]
        if unknown:
            assert done["text"] == "deploy outcome unknown; not repeated", done
            assert UNKNOWN in deploys[0] and "Refused" in deploys[1], deploys
        else:
            assert done["text"].startswith("deployed: ") and len(deploys) == 1, done
        assert len(lines(world / "notes.log")) == 1  # the idempotent note once
        assert_checked(store, world)
    finally:
        for proc in [worker, *servers]:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    reads = lines(world / "reads.log")
    if unknown:
        assert len(reads) == 1, reads
    else:
        assert len(reads) == 2 and reads[0] == reads[1], reads  # re-run, the same key


def test_each_adapter_takes_the_policies_from_the_annotations_and_refuses_a_clash(
    tmp_path: Path,
) -> None:
    from fxdurable.tools.mcp_connection import close_connections

    try:
        for framework in ADAPTERS:
            agent = build(framework, tmp_path)
            assert {t.name: t.policy for t in agent.tools} == {
                "deploy": "unsafe",
                "read_status": "safe",
                "record_note": "idempotent",
            }, framework
        from pydantic_ai import Agent

        from fxdurable.adapters import pydantic_ai

        ops = Agent(name="clash", model="test")

        @ops.tool_plain
        def deploy(release: str) -> str:
            return release

        with pytest.raises(fx.ConfigurationError, match="two tools are named 'deploy'"):
            pydantic_ai.durable_agent(ops, tools=mcp_tools(tmp_path))
        # The SDK's own MCP servers are refused, pointing at the durable way.
        from agents import Agent as SDKAgent
        from agents.mcp import MCPServerStdio

        from fxdurable.adapters import openai_agents

        sdk_server = MCPServerStdio({"command": sys.executable, "args": [str(HERE)]})
        sdk = SDKAgent(name="ops", model="gpt-4o", mcp_servers=[sdk_server])
        with pytest.raises(fx.ConfigurationError, match=r"tools=fx\.mcp_tools\(server\)"):
            openai_agents.durable_agent(sdk)
    finally:
        close_connections()


def shown_agent(framework: str, world: Path, seen: dict[str, dict[str, Any]]) -> fx.Agent:
    """``framework``'s agent with the server's tools and a model that answers ``ok`` and
    puts in ``seen`` each tool's parameters as the framework handed them to it."""
    tools = mcp_tools(world)
    if framework == "pydantic-ai":
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart
        from pydantic_ai.models.function import FunctionModel

        from fxdurable.adapters import pydantic_ai

        def answer(messages: object, info: Any) -> ModelResponse:
            seen.update({t.name: t.parameters_json_schema for t in info.function_tools})
            return ModelResponse(parts=[TextPart("ok")])

        ops = Agent(FunctionModel(answer), name="ops")
        return pydantic_ai.durable_agent(ops, tools=tools, stream=False)
    if framework == "openai-agents":
        from agents import Agent as SDKAgent
        from agents.testing import ModelCall, ModelStep, ScriptedModel
        from test_openai_agents_world import assistant_message

        from fxdurable.adapters import openai_agents

        def respond(call: ModelCall) -> list[Any]:
            seen.update({t.name: t.params_json_schema for t in call.tools})  # type: ignore[union-attr]
            return [assistant_message("ok")]

        sdk = SDKAgent(name="ops", model=ScriptedModel([ModelStep.respond(respond)]))
        return openai_agents.durable_agent(sdk, tools=tools)
    from langchain_core.messages import AIMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from test_langchain_agent import ToolCallingFakeChatModel

    from fxdurable.adapters import langchain

    class Binding(ToolCallingFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeChatModel:
            for given in tools:
                # The tool's own args_schema; a provider's client is then sent LangChain's
                # conversion of it, which drops "title" keys (as for any LangChain tool).
                assert isinstance(given.args_schema, dict), given
                seen[given.name] = given.args_schema
                function = convert_to_openai_tool(given)["function"]
                assert function["parameters"]["required"] == given.args_schema["required"]
            return self

    model = Binding(respond=lambda messages: AIMessage(content="ok"))
    if framework == "langchain":
        return langchain.durable_agent(model, tools, name="ops")
    from langchain.agents import create_agent

    durable = langchain.DurableMiddleware(tools=tools)
    return durable.agent(create_agent(model, [], middleware=[durable]), name="ops")


@pytest.mark.parametrize("framework", ADAPTERS)
def test_the_framework_model_is_shown_the_servers_own_schema(
    tmp_path: Path, framework: str
) -> None:
    import asyncio

    from fxdurable.tools.mcp_connection import close_connections

    seen: dict[str, dict[str, Any]] = {}
    try:
        agent = shown_agent(framework, tmp_path, seen)
        listed = {t.name: t for t in mcp_tools(tmp_path)}

        async def main() -> str:
            async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
                return await rt.session("s").run("hello")

        assert asyncio.run(main()) == "ok"
    finally:
        close_connections()
    assert sorted(seen) == ["deploy", "read_status", "record_note"], seen
    for name, schema in seen.items():
        # What the server listed (MCPArguments keeps it byte for byte), as the model got it.
        assert schema == listed[name].json_schema(), (framework, name, schema)


def main(argv: list[str]) -> int:
    http = int(argv[argv.index("--http") + 1]) if "--http" in argv else None
    if argv[:1] == ["serve"]:
        serve(Path(argv[1]), http)
        return 0
    import pydai_driver

    framework = argv[argv.index("--framework") + 1]
    ours = {"--framework", framework} | ({"--http", str(http)} if http is not None else set())
    sys.argv = [sys.argv[0], *(a for a in argv if a not in ours)]
    return pydai_driver.serve(lambda world: build(framework, world, http))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
