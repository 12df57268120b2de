"""Recovery of a turn a crash left with a task ``running``: the replay policy decides.

The crash is simulated: the journal is driven as a worker would up to ``tool.after-intent``
(under a pid that no longer exists), then a fresh Runtime on the same file must recover it.
"""

from __future__ import annotations

import pydantic
import pytest
from fxrt_support import (
    FAST,
    check_invariants,
    db_url,
    events,
    leave_crashed_turn,
    owned_store,
    read,
    rounds_done,
    run,
    submission,
    tasks,
    tool_messages,
)

import fxdurable as fx
from fxdurable.runtime.decide import refusal_message, unknown_message


class Deploy(pydantic.BaseModel):
    version: str


class Path(pydantic.BaseModel):
    path: str


def _recover_and_check(url, agent, crashed, check):
    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session(crashed.session_id).wait(crashed.submission.id, timeout=10)
            check(rt, sub, tasks(rt, crashed.turn_id), events(rt, crashed.session_id))
            await check_invariants(rt, crashed.session_id)

    run(main())


def test_safe_tool_is_reexecuted(tmp_path):
    url = db_url(tmp_path)
    calls: list[tuple[str, int]] = []

    @fx.tool
    def lookup(inp: Path, ctx: fx.ToolContext) -> str:
        "Read."
        calls.append((ctx.execution_id, ctx.attempt))
        return f"contents of {inp.path}"

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("read it")])
    agent = fx.Agent("eng", model, tools=[lookup])
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("lookup", path="a")], policies=["safe"], running=[0]
    )
    assert crashed.tasks[0].status.value == "running"

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed" and sub.result == "read it"
        assert sub.interruptions == 1 and sub.attempts == 2
        assert calls == [(crashed.tasks[0].execution_id, 2)]
        assert recorded[0].status.value == "completed" and recorded[0].runs == 2
        started = [e for e in evs if e.type == "tool.started"]
        assert [e.data["reason"] for e in started] == [None, "recovery"]
        assert "attempt.interrupted" in [e.type for e in evs]
        # the recorded model call was served from the record: one request, for round 1
        assert len(model.requests) == 1
        assert tool_messages(model.requests[0])[0].text == "contents of a"

    _recover_and_check(url, agent, crashed, check)


def test_idempotent_tool_is_reexecuted_with_the_same_execution_id(tmp_path):
    url = db_url(tmp_path)
    keys: list[str] = []

    @fx.tool(replay="idempotent")
    async def charge(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Charge with an idempotency key."
        keys.append(ctx.execution_id)
        return f"charged {ctx.execution_id}"

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("charged")])
    agent = fx.Agent("eng", model, tools=[charge])
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("charge", version="1")],
        policies=["idempotent"],
        running=[0],
    )

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed"
        assert keys == [crashed.tasks[0].execution_id]
        assert recorded[0].execution_id == crashed.tasks[0].execution_id
        assert recorded[0].status.value == "completed" and recorded[0].runs == 2
        started = [e for e in evs if e.type == "tool.started"]
        assert [e.data["execution_id"] for e in started] == [crashed.tasks[0].execution_id] * 2
        assert started[1].data["reason"] == "recovery"

    _recover_and_check(url, agent, crashed, check)


def test_unsafe_tool_is_not_reexecuted_and_the_model_is_told(tmp_path):
    url = db_url(tmp_path)
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.version)
        return "deployed"

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("I will check first")])
    agent = fx.Agent("eng", model, tools=[deploy])
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("deploy", version="1.4")], policies=["unsafe"], running=[0]
    )

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed" and sub.result == "I will check first"
        assert executed == []
        task = recorded[0]
        assert task.status.value == "outcome_unknown"
        assert task.runs == 1
        assert task.result == unknown_message("deploy")
        unknown = [e for e in evs if e.type == "tool.outcome_unknown"]
        assert len(unknown) == 1 and unknown[0].data["task"] == task.id
        assert [e.data["reason"] for e in evs if e.type == "tool.started"] == [None]
        seen = tool_messages(model.requests[0])
        assert len(seen) == 1
        assert seen[0].text == unknown_message("deploy")
        assert seen[0].tool_call_id == task.id and seen[0].tool_name == "deploy"
        text = seen[0].text
        for phrase in (
            "`deploy`",
            "interrupted",
            "may or may not have completed",
            "Do not repeat it blindly",
            "inspect the current system state",
        ):
            assert phrase in text

    _recover_and_check(url, agent, crashed, check)


def test_running_task_of_a_tool_no_longer_registered_is_unknown(tmp_path):
    url = db_url(tmp_path)
    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("ok")])
    agent = fx.Agent("eng", model)  # the tool was removed by a redeploy
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("gone", x=1)], policies=["safe"], running=[0]
    )

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed"
        assert recorded[0].status.value == "outcome_unknown"
        assert tool_messages(model.requests[0])[0].text == unknown_message("gone")

    _recover_and_check(url, agent, crashed, check)


def test_repeat_of_an_unknown_call_is_refused_once_then_runs(tmp_path):
    url = db_url(tmp_path)
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.version)
        return f"deployed {inp.version}"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        done = rounds_done(request)
        if done in (1, 2):  # after the unknown outcome, and again after the refusal
            return fx.reply("repeating", fx.call("deploy", version="1.4"))
        return fx.reply("done")

    model = fx.ScriptedModel(policy)
    agent = fx.Agent("eng", model, tools=[deploy])
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("deploy", version="1.4")], policies=["unsafe"], running=[0]
    )

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed" and sub.result == "done"
        assert executed == ["1.4"]  # the deliberate second repeat only
        assert [(t.round, t.status.value, t.runs) for t in recorded] == [
            (0, "outcome_unknown", 1),
            (1, "refused", 0),
            (2, "completed", 1),
        ]
        assert recorded[1].result == refusal_message("deploy")
        assert unknown_message("deploy") in refusal_message("deploy")
        # the model read the unknown outcome, then the refusal, then the result
        assert tool_messages(model.requests[0])[-1].text == unknown_message("deploy")
        assert tool_messages(model.requests[1])[-1].text == refusal_message("deploy")
        assert tool_messages(model.requests[2])[-1].text == "deployed 1.4"
        assert [e.type for e in evs].count("tool.refused") == 1

    _recover_and_check(url, agent, crashed, check)


class Hold(pydantic.BaseModel):
    tag: str
    hold_s: float = 0.0


@pytest.mark.parametrize(
    ("repeat", "statuses", "executed"),
    [
        # A different input is a new call: it runs.
        ({"tag": "y"}, ["outcome_unknown", "completed"], ["y"]),
        # The same input spelled without the field at its default: the same call, refused
        # like a byte-equal repeat would be.
        ({"tag": "x"}, ["outcome_unknown", "refused"], []),
    ],
    ids=["different-input", "defaults-left-out"],
)
def test_a_repeat_is_the_same_input_not_the_same_text(tmp_path, repeat, statuses, executed):
    url = db_url(tmp_path)
    ran: list[str] = []

    @fx.tool(replay="unsafe")
    def hold(inp: Hold, ctx: fx.ToolContext) -> str:
        "Hold."
        ran.append(inp.tag)
        return "held"

    again = fx.call("hold", **repeat)
    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("", again), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=[hold])
    first = fx.call("hold", hold_s=0.0, tag="x")
    crashed = leave_crashed_turn(url, agent="eng", calls=[first], policies=["unsafe"], running=[0])

    def check(rt, sub, recorded, evs):
        assert ran == executed
        assert [t.status.value for t in recorded] == statuses
        assert recorded[1].arguments == again.arguments  # the model's text, as it wrote it
        if "refused" in statuses:
            assert recorded[1].result == refusal_message("hold")

    _recover_and_check(url, agent, crashed, check)


@pytest.mark.parametrize("reuse", [False, True])
def test_reuse_false_rereads_a_completed_safe_call_of_the_interrupted_round(tmp_path, reuse):
    url = db_url(tmp_path)
    reads: list[str] = []
    world = {"a": "after the edit"}

    @fx.tool(reuse=reuse)
    def read_file(inp: Path, ctx: fx.ToolContext) -> str:
        "Read a file."
        reads.append(inp.path)
        return world[inp.path]

    @fx.tool(replay="unsafe")
    def edit(inp: Path, ctx: fx.ToolContext) -> str:
        "Edit."
        raise AssertionError("an unsafe running call is never re-executed")

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=[read_file, edit])
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("read_file", path="a"), fx.call("edit", path="a")],
        policies=["safe", "unsafe"],
        completed={0: "before the edit"},
        running=[1],
    )

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed"
        read_task, edit_task = recorded
        assert edit_task.status.value == "outcome_unknown"
        assert read_task.status.value == "completed"
        seen = [m.text for m in tool_messages(model.requests[0])]
        if reuse:
            assert reads == []
            assert read_task.runs == 1
            assert seen == ["before the edit", unknown_message("edit")]
        else:
            assert reads == ["a"]
            assert read_task.runs == 2
            assert seen == ["after the edit", unknown_message("edit")]
            refresh = [
                e for e in evs if e.type == "tool.started" and e.data["task"] == read_task.id
            ]
            assert [e.data["reason"] for e in refresh] == [None, "refresh"]

    _recover_and_check(url, agent, crashed, check)


def test_completed_steps_are_served_from_the_record(tmp_path):
    """A completed unsafe call before the crash is not re-run; a pending one runs normally."""
    url = db_url(tmp_path)
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.version)
        return f"deployed {inp.version}"

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("both done")])
    agent = fx.Agent("eng", model, tools=[deploy])
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("deploy", version="1"), fx.call("deploy", version="2")],
        policies=["unsafe", "unsafe"],
        completed={0: "deployed 1"},
    )
    assert [t.status.value for t in crashed.tasks] == ["completed", "pending"]

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed"
        assert executed == ["2"]  # the pending call: intent never committed, so it runs
        assert [(t.status.value, t.runs) for t in recorded] == [("completed", 1), ("completed", 1)]
        assert [m.text for m in tool_messages(model.requests[0])] == ["deployed 1", "deployed 2"]
        assert len(model.requests) == 1
        assert "tool.outcome_unknown" not in [e.type for e in evs]

    _recover_and_check(url, agent, crashed, check)


def test_crash_before_any_model_call_runs_from_the_start(tmp_path):
    url = db_url(tmp_path)
    model = fx.ScriptedModel([fx.reply("fresh answer")])
    agent = fx.Agent("eng", model)
    crashed = leave_crashed_turn(url, agent="eng", record_model=False)

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed" and sub.result == "fresh answer"
        assert sub.interruptions == 1
        assert len(model.requests) == 1
        # one user message, even though the turn was started twice
        assert [m.role for m in model.requests[0].messages] == ["user"]

    _recover_and_check(url, agent, crashed, check)


def test_crash_before_the_first_attempt_runs_it_as_a_first_attempt(tmp_path):
    url = db_url(tmp_path)
    model = fx.ScriptedModel([fx.reply("fresh answer")])
    agent = fx.Agent("eng", model)
    crashed = leave_crashed_turn(url, agent="eng", begin=False)

    def check(rt, sub, recorded, evs):
        assert sub.status.value == "completed"
        assert sub.interruptions == 0 and sub.attempts == 1

    _recover_and_check(url, agent, crashed, check)


def test_recovered_session_accepts_the_next_message(tmp_path):
    url = db_url(tmp_path)

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        return "ok"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        return fx.reply(f"re: {[m for m in request.messages if m.role == 'user'][-1].text}")

    agent = fx.Agent("eng", fx.ScriptedModel(policy), tools=[deploy])
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("deploy", version="1")], policies=["unsafe"], running=[0]
    )

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s = rt.session("s1")
            first = await s.wait(crashed.submission.id, timeout=10)
            assert first.status.value == "completed"
            assert await s.run("next", timeout=10) == "re: next"
            assert submission(rt, first.id).status.value == "completed"
            assert len(read(rt, lambda v: v.submissions("s1"))) == 2
            await check_invariants(rt, "s1")

    run(main())
