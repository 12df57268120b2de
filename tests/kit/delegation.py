"""The story agent's subagent: ``research``, a child session of :data:`RESEARCHER`.

Prompted ``delegate <tag>``, the story agent asks ``research`` for ``research <tag> a`` and
ends with :func:`delegated_text`; prompted ``delegate2 <tag>``, it asks for ``research <tag> a``
and ``research <tag> b`` in one model response: one parallel batch, whose two children run at
once, or one after the other when the story agent has ``parallel_tools=False``. The
researcher answers ``research <tag> a`` after one ``lookup`` and ``research <tag> b`` after one
``fetch`` (so ``subagent.in-child:fetch`` kills the process inside the second child): both
safe tools that report progress, take ``$FXD_TEST_RESEARCH_S`` seconds (default 0) and log
every execution to ``calls.log``. Its model logs every request to ``model.log`` like the
story's (:func:`tests.kit.story.logged_policy`), so a child's recorded step is never asked
again.

With ``barrier=True`` (two children of one batch, killed while both run) each tool's first
run logs its name to ``barrier.log`` and waits there until both tools have arrived, so both
children are inside their tool at once; then ``fetch`` returns, and ``lookup`` holds until
the process is killed (at most :data:`LOOKUP_HOLD_S`): ``subagent.in-child:fetch`` then
finds the first child's tool still running, every time. Later runs (recovery) do not wait.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.core.subagent import child_request_id, child_session_id
from tests.kit.story import (
    SESSION,
    append_line,
    asked,
    current_turn,
    logged_requests,
    read_lines,
)
from tests.kit.world import World, assert_model_requests

RESEARCHER = "crash-researcher"
_DELEGATE = re.compile(r"delegate(2?) (\S+)")
_RESEARCH = re.compile(r"research (\S+) ([ab])")
BARRIER_TOOLS = ("lookup", "fetch")
# How long a barrier's lookup holds on its first run: far longer than the kill that ends it
# takes to come (fetch returns and its result is committed), so only a broken test waits it out.
LOOKUP_HOLD_S = 30.0


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


def meet_at_barrier(world: Path, name: str) -> None:
    """Log ``name`` to ``barrier.log`` and wait until every tool of :data:`BARRIER_TOOLS` has;
    then ``lookup`` holds (see the module docstring)."""
    barrier = world / "barrier.log"
    append_line(barrier, name)
    give_up = time.monotonic() + LOOKUP_HOLD_S
    while not set(BARRIER_TOOLS) <= set(read_lines(barrier)) and time.monotonic() < give_up:
        time.sleep(0.005)
    if name == "lookup":
        while time.monotonic() < give_up:  # until the SIGKILL at subagent.in-child:fetch
            time.sleep(0.05)


def researcher(world: Path, *, barrier: bool = False) -> fx.Agent:
    calls = world / "calls.log"

    def tool(name: str) -> fx.Tool:
        def run(inp: Topic, ctx: fx.ToolContext) -> str:
            append_line(calls, f"{name} {ctx.execution_id} {ctx.attempt} {os.getpid()}")
            ctx.progress(f"{name} {inp.topic}\n")
            if barrier and ctx.attempt == 1:
                meet_at_barrier(world, name)
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


def research_tool(world: Path, *, barrier: bool = False) -> fx.Tool:
    return fx.subagent(
        researcher(world, barrier=barrier),
        name="research",
        description="Hand a research task to a researcher.",
    )


# -- checks of a world at rest --------------------------------------------------------------


def child_requests(world: World) -> list[str]:
    """The request ids of the story's children (one submission per ``research`` call)."""
    return [child_request_id(t.execution_id) for t in world.tasks_of("research")]


def assert_children_resumed(
    world: World, parts: str, *, killed_in: str, together: bool = False
) -> None:
    """The story completed with every child's answer, in asked order, after one kill inside
    the child that ran ``killed_in``. ``together``: the children ran in one batch and the kill
    found both in flight (``barrier``): each was interrupted, each call re-executed."""
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == delegated_text("crash", parts)
    assert sub.interruptions == 1
    calls = world.tasks_of("research")
    assert [t.index for t in calls] == list(range(len(parts)))
    children: dict[str, str] = {}  # the child session of each tool's execution
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
        children.update({t.execution_id: child for t in world.tasks if t.session_id == child})
    # The killed child resumed from its recorded tool result: the tool ran once, in the
    # killed process; every model round of every session was asked once (none re-run).
    [(execution, run)] = world.calls_of(killed_in)
    assert run == 1
    assert_model_requests(world)
    killed_child = children[execution]
    # The parent's killed calls were re-executed by recovery, each other call ran once.
    reasons = [[e.data.get("reason") for e in world.task_events(c, "tool.started")] for c in calls]
    if together:
        # Both children were in their tools: the other one's (safe, never recorded) ran again
        # on recovery, with the same execution id; both children and both calls resumed.
        [other] = [t for t in BARRIER_TOOLS if t != killed_in]
        runs = world.calls_of(other)
        assert [r for _e, r in runs] == [1, 2] and len({e for e, _r in runs}) == 1, runs
        resumed = {killed_child, children[runs[0][0]]}
        assert len(resumed) == 2
        assert reasons == [[None, "recovery"]] * len(parts)
    else:
        resumed = {killed_child}
        assert reasons == [[None]] * (len(parts) - 1) + [[None, "recovery"]]
    for child in resumed:
        assert world.sessions[child].parent_session == SESSION
        assert [s.interruptions for s in world.submissions if s.session_id == child] == [1]
