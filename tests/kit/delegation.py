"""The story agent's subagent: ``research``, a child session of :data:`RESEARCHER`.

Prompted ``delegate <tag>``, the story agent asks ``research`` for ``research <tag> a`` and
ends with :func:`delegated_text`; prompted ``delegate2 <tag>``, it asks for ``research <tag> a``
and ``research <tag> b`` in one model response (two children of one batch, run one after the
other today). The researcher answers ``research <tag> a`` after one ``lookup`` and
``research <tag> b`` after one ``fetch`` (so ``subagent.in-child:fetch`` kills the process
inside the second child), both safe tools that report progress and log every execution to
``calls.log``; its model logs every request to ``model.log`` like the story's
(:func:`tests.kit.story.logged_policy`), so a child's recorded step is never asked again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pydantic

import fxdurable as fx
from tests.kit.story import append_line, asked, current_turn, logged_requests

RESEARCHER = "crash-researcher"
_DELEGATE = re.compile(r"delegate(2?) (\S+)")
_RESEARCH = re.compile(r"research (\S+) ([ab])")


def findings(tag: str, part: str) -> str:
    """What the researcher answers for ``research <tag> <part>``."""
    return f"Research {tag} {part}: {tag}-{part} is 42."


def delegated_text(tag: str, parts: str = "a") -> str:
    """How ``delegate <tag>`` (parts ``a``) or ``delegate2 <tag>`` (``ab``) ends."""
    return f"Delegated {tag}: " + " | ".join(findings(tag, p) for p in parts)


def delegation_reply(prompt: str, results: list[str]) -> fx.ModelResponse:
    """The story agent's turn for a ``delegate`` prompt, given the tool results so far."""
    matched = _DELEGATE.fullmatch(prompt)
    assert matched is not None, prompt
    two, tag = matched[1] == "2", matched[2]
    parts = "ab" if two else "a"
    if not results:
        calls = [fx.call("research", task=f"research {tag} {p}") for p in parts]
        return fx.reply("Delegating.", *calls)
    if all(r.startswith("Research ") for r in results):
        return fx.reply(f"Delegated {tag}: " + " | ".join(results))
    return fx.reply(f"Delegation failed: {' | '.join(results)}")


class Topic(pydantic.BaseModel):
    topic: str


def researcher_policy(request: fx.ModelRequest) -> fx.ModelResponse:
    turn = current_turn(request.messages)
    matched = _RESEARCH.fullmatch(asked(turn))
    if matched is None:
        return fx.reply(f"I only research: {asked(turn)!r}")
    tag, part = matched[1], matched[2]
    if not any(getattr(m, "role", None) == "tool" for m in turn):
        tool = "lookup" if part == "a" else "fetch"
        return fx.reply(f"Looking into {tag} {part}.", fx.call(tool, topic=f"{tag}-{part}"))
    return fx.reply(findings(tag, part))


def researcher(world: Path) -> fx.Agent:
    calls = world / "calls.log"

    def tool(name: str) -> fx.Tool:
        def run(inp: Topic, ctx: fx.ToolContext) -> str:
            append_line(calls, f"{name} {ctx.execution_id} {ctx.attempt} {os.getpid()}")
            ctx.progress(f"{name} {inp.topic}\n")
            return f"{inp.topic} is 42"

        return fx.define_tool(name, description=f"{name} a topic", input_model=Topic, execute=run)

    return fx.Agent(
        RESEARCHER,
        fx.ScriptedModel(logged_requests(world, researcher_policy), name="scripted/researcher"),
        instructions="You research one topic.",
        tools=[tool("lookup"), tool("fetch")],
    )


def research_tool(world: Path) -> fx.Tool:
    return fx.subagent(
        researcher(world), name="research", description="Hand a research task to a researcher."
    )
