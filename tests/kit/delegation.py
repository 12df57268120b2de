"""The story agent's subagent: ``research``, a child session of :data:`RESEARCHER`.

Prompted ``delegate <tag>``, the story agent asks ``research`` for ``research <tag> a`` and
ends with :func:`delegated_text`; prompted ``delegate2 <tag>``, it asks for ``research <tag> a``
and ``research <tag> b`` in one model response (two children of one batch, run one after the
other today). The researcher answers ``research <tag> a`` after one ``lookup`` and
``research <tag> b`` after one ``fetch`` (so ``subagent.in-child:fetch`` kills the process
inside the second child): both safe tools that report progress, take
``$FXD_TEST_RESEARCH_S`` seconds (default 0) and log every execution to ``calls.log``. Its
model logs every request to ``model.log`` like the story's
(:func:`tests.kit.story.logged_policy`), so a child's recorded step is never asked again.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.core.subagent import child_request_id, child_session_id
from tests.kit.story import SESSION, append_line, asked, current_turn, logged_requests
from tests.kit.world import World, assert_model_requests

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
            # A viewer of the parent can catch the call mid-child (tests/http).
            time.sleep(float(os.environ.get("FXD_TEST_RESEARCH_S") or 0.0))
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


# -- checks of a world at rest --------------------------------------------------------------


def child_requests(world: World) -> list[str]:
    """The request ids of the story's children (one submission per ``research`` call)."""
    return [child_request_id(t.execution_id) for t in world.tasks_of("research")]


def assert_children_resumed(world: World, parts: str, *, killed_in: str) -> None:
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == delegated_text("crash", parts)
    assert sub.interruptions == 1
    calls = world.tasks_of("research")
    assert [t.index for t in calls] == list(range(len(parts)))
    for call, part in zip(calls, parts, strict=True):
        child = child_session_id(SESSION, call.execution_id)
        assert (call.status, call.result, call.child_session) == (
            "completed",
            findings("crash", part),
            child,
        )
        assert not world.task_events(call, "tool.outcome_unknown")
        # One child session, one child submission, linked both ways.
        session = world.sessions[child]
        assert (session.parent_session, session.parent_task) == (SESSION, call.id)
        [child_sub] = [s for s in world.submissions if s.session_id == child]
        assert child_sub.request_id == child_request_id(call.execution_id)
        assert child_sub.result_text == findings("crash", part)
    # The killed child resumed from its recorded tool result: the tool ran once, in the
    # killed process; every model round of every session was asked once (none re-run).
    [(execution, run)] = world.calls_of(killed_in)
    assert run == 1
    assert_model_requests(world)
    killed = [t for t in world.tasks if t.execution_id == execution]
    [killed_child] = {t.session_id for t in killed}
    assert world.sessions[killed_child].parent_session == SESSION
    interrupted = [s for s in world.submissions if s.session_id == killed_child]
    assert [s.interruptions for s in interrupted] == [1]
    # The parent's killed call was re-executed by recovery, each other call ran once.
    reasons = {
        call.index: [e.data.get("reason") for e in world.task_events(call, "tool.started")]
        for call in calls
    }
    last = len(parts) - 1
    assert reasons[last] == [None, "recovery"]
    assert all(reasons[i] == [None] for i in range(last))
