"""Each turn records the version of the agent that started it, and each attempt the version
that ran it (``Agent(version=...)``, or a digest of what the model is given): a turn
recovered by a newer deploy shows both."""

from __future__ import annotations

import pydantic
import pytest
from fxrt_support import FAST, db_url, leave_crashed_turn, owned_store, read, run

import fxdurable as fx


class Topic(pydantic.BaseModel):
    topic: str


def lookup_tool(description: str = "Look a topic up.") -> fx.Tool:
    def lookup(inp: Topic, ctx: fx.ToolContext) -> str:
        return "42"

    return fx.define_tool("lookup", description=description, input_model=Topic, execute=lookup)


def agent(**kwargs) -> fx.Agent:
    model = fx.ScriptedModel([fx.reply("done")])
    return fx.Agent("eng", model, tools=kwargs.pop("tools", [lookup_tool()]), **kwargs)


def test_an_undeclared_version_is_a_digest_of_what_the_model_is_given():
    base = agent().version
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 16
    assert agent().version == base, "the same definition, the same version"
    assert agent(instructions="Be brief.").version != base
    assert agent(tools=[lookup_tool("Look it up, carefully.")]).version != base
    assert agent(tools=[]).version != base
    assert agent(output_type=Topic).version != base
    # The model is not part of it: a Fallback switch or a model upgrade is not a new agent.
    other_model = fx.Agent(
        "eng", fx.ScriptedModel([fx.reply("x")], name="m2"), tools=[lookup_tool()]
    )
    assert other_model.version == base


def test_a_declared_version_is_recorded_as_given():
    assert agent(version="2026.12.1").version == "2026.12.1"
    with pytest.raises(fx.ConfigurationError, match="version"):
        agent(version=" ")


def test_a_turn_recovered_by_a_newer_deploy_records_both_versions(tmp_path):
    url = db_url(tmp_path)
    crashed = leave_crashed_turn(url, agent="eng", record_model=False)

    async def main() -> None:
        async with fx.Runtime([agent(version="v2")], store=owned_store(url), settings=FAST) as rt:
            settled = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert settled.result == "done"
            attempts = read(rt, lambda v: list(v.attempts(crashed.submission.id)))
            turn = read(rt, lambda v: v.get_turn(crashed.submission.id))
            events = read(rt, lambda v: list(v.events("s1")))
            # The dead worker's attempt predates versions (None); the recovery ran v2.
            assert [(a.number, a.agent_version) for a in attempts] == [(1, None), (2, "v2")]
            assert turn is not None and turn.agent_version is None  # started before
            started = [e.data.get("agent_version") for e in events if e.type == "attempt.started"]
            assert started == [None, "v2"]

    run(main())


def test_a_new_turn_records_its_agents_version(tmp_path):
    async def main() -> None:
        async with fx.Runtime(
            [agent(version="v3")], store=owned_store(db_url(tmp_path)), settings=FAST
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("hi")
            await s.wait(sub.id, timeout=10)
            turn = read(rt, lambda v: v.get_turn(sub.id))
            assert turn is not None and turn.agent_version == "v3"
            (attempt,) = read(rt, lambda v: list(v.attempts(sub.id)))
            assert attempt.agent_version == "v3"

    run(main())
