"""The tool, agent and model-facing API: definitions, validation, rendering, configuration."""

from __future__ import annotations

import asyncio
import json

import pydantic
import pytest
from fxrt_support import run

import fxdurable as fx
from fxdurable.runtime.models.base import ChatMessage, Finish, TextDelta
from fxdurable.runtime.tools import render_result


class Deploy(pydantic.BaseModel):
    version: str
    dry_run: bool = False


class Optional_(pydantic.BaseModel):
    limit: int = 10


def test_tool_decorator_without_arguments():
    @fx.tool
    def lookup(inp: Deploy, ctx: fx.ToolContext) -> str:
        """Look up a version.

        Second paragraph."""
        return inp.version

    assert isinstance(lookup, fx.Tool)
    assert lookup.name == "lookup"
    assert lookup.description == "Look up a version.\n\nSecond paragraph."
    assert lookup.input_model is Deploy
    assert lookup.replay == "safe" and lookup.policy == "safe"
    assert lookup.reuse is True
    schema = lookup.json_schema()
    assert schema["properties"]["version"]["type"] == "string"
    assert schema["required"] == ["version"]


class Release(Deploy):
    pass


def test_a_tools_schema_is_built_once_per_input_model(monkeypatch):
    """Every model request carries each tool's schema; pydantic builds it in about a
    millisecond, so it is built once and shared by every tool with that input model."""
    built: list[type] = []
    original = Deploy.model_json_schema.__func__

    def counting(cls, *args, **kwargs):
        built.append(cls)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(Release, "model_json_schema", classmethod(counting))

    @fx.tool
    def ship(inp: Release, ctx: fx.ToolContext) -> str:
        return inp.version

    @fx.tool
    def stage(inp: Release, ctx: fx.ToolContext) -> str:
        return inp.version

    first = ship.json_schema()
    assert ship.json_schema() is first and stage.json_schema() is first
    assert first == Deploy.model_json_schema() | {"title": "Release"}
    assert built == [Release]


def test_tool_decorator_with_arguments():
    @fx.tool(name="ship-it", replay="unsafe", timeout_s=3)
    async def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        return "ok"

    assert deploy.name == "ship-it"
    assert deploy.description == "deploy"  # no docstring: the function's name
    assert deploy.policy == "unsafe" and deploy.timeout_s == 3

    @fx.tool(replay="idempotent")
    def charge(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Charge."
        return "ok"

    assert charge.policy == "idempotent"

    @fx.tool(reuse=False)
    def read_file(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Read."
        return "ok"

    assert read_file.reuse is False and read_file.policy == "safe"


@pytest.mark.parametrize("replay", ["unsafe", "idempotent"])
def test_reuse_false_is_only_for_safe_tools(replay):
    with pytest.raises(fx.ConfigurationError, match="reuse=False"):
        fx.define_tool(
            "x",
            description="x",
            input_model=Deploy,
            execute=lambda i, c: "",
            replay=replay,
            reuse=False,
        )


@pytest.mark.parametrize("replay", ["maybe", "Idempotent", object(), ("safe",)])
def test_replay_takes_one_of_the_three_policy_names(replay: object) -> None:
    """One kind of value (a name), so a policy object or a typo fails at definition, saying
    what is accepted. (``None`` asks for the default: unsafe if durable, else safe.)"""
    with pytest.raises(fx.ConfigurationError) as caught:
        fx.define_tool(
            "x",
            description="x",
            input_model=Deploy,
            execute=lambda i, c: "",
            replay=replay,  # type: ignore[arg-type]
        )
    assert "replay must be one of 'safe', 'idempotent', 'unsafe'" in str(caught.value)


def test_bad_tool_definitions_are_refused():
    with pytest.raises(fx.ConfigurationError, match="replay"):
        fx.define_tool(
            "x",
            description="x",
            input_model=Deploy,
            execute=lambda i, c: "",
            replay="maybe",  # type: ignore[arg-type]
        )
    with pytest.raises(fx.ConfigurationError, match="tool name"):
        fx.define_tool("two words", description="x", input_model=Deploy, execute=lambda i, c: "")
    with pytest.raises(fx.ConfigurationError, match="pydantic"):

        @fx.tool
        def untyped(inp, ctx):  # type: ignore[no-untyped-def]
            return ""

    with pytest.raises(fx.ConfigurationError, match="pydantic"):

        @fx.tool
        def not_a_model(inp: dict, ctx: fx.ToolContext) -> str:  # type: ignore[type-arg]
            return ""


def test_parse_validates_the_models_json():
    tool = fx.define_tool("deploy", description="d", input_model=Deploy, execute=lambda i, c: "")
    assert tool.parse('{"version": "1.4"}') == Deploy(version="1.4")
    assert tool.parse('{\n  "version": "1.4",\n  "dry_run": true\n}').dry_run is True
    with pytest.raises(fx.ToolInputError, match="not valid JSON"):
        tool.parse('{"version": ')
    with pytest.raises(fx.ToolInputError, match=r"invalid arguments for deploy: version: "):
        tool.parse("{}")
    with pytest.raises(fx.ToolInputError, match="dry_run"):
        tool.parse('{"version": "1", "dry_run": "perhaps"}')
    optional = fx.define_tool("o", description="o", input_model=Optional_, execute=lambda i, c: "")
    assert optional.parse("") == Optional_()  # no arguments at all
    assert optional.parse("   ") == Optional_()
    # Arguments encoded twice (a JSON string holding the object), which some models send: the
    # recorded text stays as it was, so parsing is where they are unwrapped.
    assert tool.parse('"{\\"version\\": \\"2.0\\"}"') == Deploy(version="2.0")


def test_run_renders_results_as_text():
    ctx = fx.ToolContext(execution_id="x1", session_id="s", tool_name="t", attempt=1)

    def as_dict(inp: Deploy, c: fx.ToolContext) -> dict[str, object]:
        return {"version": inp.version, "ctx": c.execution_id, "ü": 1}

    async def as_model(inp: Deploy, c: fx.ToolContext) -> Deploy:
        return inp

    tool_a = fx.define_tool("a", description="a", input_model=Deploy, execute=as_dict)
    tool_b = fx.define_tool("b", description="b", input_model=Deploy, execute=as_model)

    async def main():
        text_a = await tool_a.run(Deploy(version="1"), ctx)
        text_b = await tool_b.run(Deploy(version="2"), ctx)
        return text_a, text_b

    text_a, text_b = run(main())
    assert json.loads(text_a) == {"version": "1", "ctx": "x1", "ü": 1}
    assert "ü" in text_a  # not ASCII-escaped
    assert json.loads(text_b) == {"version": "2", "dry_run": False}
    assert render_result("plain") == "plain"
    assert render_result(3) == "3"
    assert render_result(None) == "null"


def test_a_tool_of_the_input_alone_is_called_without_the_context():
    """``def f(input)``: it needs no context, and runs (sync or async) without one."""
    ctx = fx.ToolContext(execution_id="x1", session_id="s", tool_name="t", attempt=1)

    @fx.tool
    def version(inp: Deploy) -> str:
        """The version."""
        return inp.version

    @fx.tool
    async def dry(inp: Deploy) -> str:
        """Whether it is a dry run."""
        return str(inp.dry_run)

    async def main() -> tuple[str, str]:
        return await version.run(Deploy(version="7"), ctx), await dry.run(Deploy(version="7"), ctx)

    assert run(main()) == ("7", "False")
    assert version.description == "The version."


def test_agent_and_durability_validation():
    model = fx.ScriptedModel([fx.reply("x")])
    tool = fx.define_tool("t", description="t", input_model=Deploy, execute=lambda i, c: "")
    with pytest.raises(fx.ConfigurationError, match="duplicate tools"):
        fx.Agent("eng", model, tools=[tool, tool])
    with pytest.raises(fx.ConfigurationError):
        fx.Agent("", model)
    with pytest.raises(fx.ConfigurationError):
        fx.Durability(max_attempts=0)
    with pytest.raises(fx.ConfigurationError):
        fx.Durability(timeout_s=0)
    agent = fx.Agent("eng", model, tools=[tool])
    assert agent.tool("t") is tool and agent.tool("nope") is None
    assert agent.durability == fx.Durability(max_attempts=10, timeout_s=3600.0)


def test_runtime_configuration_errors(tmp_path):
    a = fx.Agent("a", fx.ScriptedModel([fx.reply("x")]))
    with pytest.raises(fx.ConfigurationError):
        fx.Runtime([], store=f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(fx.ConfigurationError, match="unique"):
        fx.Runtime([a, a], store=f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(fx.ConfigurationError):
        fx.Runtime([a], store="mysql://nowhere/db")  # postgres:// is a store now (issue 27)
    with pytest.raises(fx.ConfigurationError):
        fx.Runtime([a], store="redis://127.0.0.1:6379/0?no_such_option=1")


def test_scripted_model_streams_deltas_then_one_finish():
    model = fx.ScriptedModel(
        [fx.reply("hello world, streamed", fx.call("t", b=2, a=1))], chunk_size=5, name="demo"
    )
    request = fx.ModelRequest(
        instructions="", messages=[ChatMessage(role="user", text="two words")]
    )

    async def collect():
        return [part async for part in model.stream(request)]

    parts = run(collect())
    assert model.name == "demo"
    assert all(isinstance(p, TextDelta) for p in parts[:-1])
    assert "".join(p.text for p in parts[:-1]) == "hello world, streamed"
    assert [len(p.text) for p in parts[:-1]] == [5, 5, 5, 5, 1]
    finish = parts[-1]
    assert isinstance(finish, Finish)
    assert finish.response.text == "hello world, streamed"
    assert finish.response.tool_calls == (
        fx.ToolCallRequest(name="t", arguments='{"a": 1, "b": 2}'),
    )
    assert finish.response.usage.input_tokens == 2
    assert list(model.requests) == [request]


def test_scripted_list_answers_by_position_in_the_turn_and_then_runs_out():
    model = fx.ScriptedModel([fx.reply("first"), fx.reply("second")])
    user = ChatMessage(role="user", text="go")
    assistant = ChatMessage(role="assistant", text="first")

    async def answer(*messages):
        parts = [p async for p in model.stream(fx.ModelRequest(instructions="", messages=messages))]
        return parts[-1].response.text

    assert run(answer(user)) == "first"
    assert run(answer(user, assistant)) == "second"
    assert run(answer(user, assistant, assistant)) == "(script exhausted)"
    # a new user message starts a new turn: the script starts over
    assert run(answer(user, assistant, user)) == "first"


def test_tool_context_cancelled_is_an_event():
    async def main():
        ctx = fx.ToolContext(execution_id="x", session_id="s", tool_name="t", attempt=1)
        assert not ctx.cancelled.is_set()
        ctx.cancelled.set()
        await asyncio.wait_for(ctx.cancelled.wait(), 1)

    run(main())


def test_canonical_input_fills_defaults_and_falls_back_to_canonical_json():
    class Hold(pydantic.BaseModel):
        tag: str
        hold_s: float = 0.0

    hold = fx.define_tool(
        "hold", description="Hold.", input_model=Hold, execute=lambda inp, ctx: "held"
    )
    assert hold.canonical_input('{"tag": "x"}') == hold.canonical_input('{"hold_s": 0, "tag": "x"}')
    assert hold.canonical_input('{"tag": "x"}') != hold.canonical_input('{"tag": "y"}')
    # Arguments that do not validate are compared as canonical JSON (or stripped text).
    assert hold.canonical_input('{"b": 1, "a": 2}') == hold.canonical_input('{"a":2,"b":1}')
    assert hold.canonical_input(" not json ") == "not json"
