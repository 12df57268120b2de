"""A subagent's child asks a person (its ``before_tool`` returned ``ask``) while the parent's
call waits for the child: the question is surfaced on the parent (``session.question()``,
``POST /sessions/{parent}/answer``), and answering the parent answers the child, whose wake
resumes it and, through it, the parent's call."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fxrt_support import NO_SCAN, check_invariants, fresh_store, run, tasks
from test_subagents import lead, recording_lookup

import fxdurable as fx
from fxdurable.http import HttpSettings, create_app, dev_principal


def asking_parent(looked_up: list[str]) -> fx.Agent:
    """``lead`` delegates to ``researcher``, whose ``lookup`` asks first."""

    def ask_first(tool: str, arguments: str) -> fx.Ask | None:
        return fx.ask(f"May I {tool}?") if tool == "lookup" else None

    child = fx.Agent(
        "researcher",
        fx.ScriptedModel(
            lambda r: (
                fx.reply("a is known")
                if any(m.role == "tool" for m in r.messages)
                else fx.reply("", fx.call("lookup", topic="a"))
            )
        ),
        tools=[recording_lookup(looked_up)],
        before_tool=ask_first,
    )
    return lead(
        child,
        fx.ScriptedModel(
            lambda r: (
                fx.reply(f"lead: {r.messages[-1].text}")
                if any(m.role == "tool" for m in r.messages)
                else fx.reply("", fx.call("research", task="a?"))
            )
        ),
    )


def runtime(tmp_path, looked_up: list[str]) -> fx.Runtime:
    return fx.Runtime([asking_parent(looked_up)], store=fresh_store(tmp_path), settings=NO_SCAN)


async def surfaced(session: fx.SessionHandle) -> fx.Question:
    """The question the parent shows, once the child asked it."""
    for _ in range(500):
        question = await session.question()
        if question is not None:
            return question
        await asyncio.sleep(0.01)  # waiting for a condition: the child's question
    raise AssertionError("no question surfaced on the parent")


def test_a_childs_question_is_surfaced_on_the_parent_and_answered_there(tmp_path):
    looked_up: list[str] = []

    async def main() -> None:
        async with runtime(tmp_path, looked_up) as rt:
            parent = rt.session("p1")
            sub = await parent.submit("go")
            question = await surfaced(parent)
            (call,) = tasks(rt, sub.id)
            assert question.session_id == call.child_session != "p1"
            assert (question.question, question.tool) == ("May I lookup?", "lookup")
            assert question.arguments == '{"topic": "a"}'
            assert await rt.session(question.session_id).question() == question
            answered = await parent.answer(fx.allow())
            assert answered.id == question.submission_id  # the child's submission
            settled = await parent.wait(sub.id, timeout=10)
            assert settled.result == "lead: a is known"
            assert looked_up == ["a"]
            assert await parent.question() is None
            await check_invariants(rt, "p1")

    run(main(), timeout=30)


def test_a_deny_on_the_parent_reaches_the_childs_call(tmp_path):
    looked_up: list[str] = []

    async def main() -> None:
        async with runtime(tmp_path, looked_up) as rt:
            parent = rt.session("p1")
            sub = await parent.submit("go")
            await surfaced(parent)
            await parent.answer(fx.deny("not that one"))
            assert (await parent.wait(sub.id, timeout=10)).status.value == "completed"
            assert looked_up == []
            with pytest.raises(fx.NoPendingQuestionError):
                await parent.answer(fx.allow())

    run(main(), timeout=30)


def test_the_http_answer_of_the_parent_answers_the_child(tmp_path):
    looked_up: list[str] = []

    async def main() -> None:
        async with runtime(tmp_path, looked_up) as rt:
            app = create_app(
                rt,
                authenticate=dev_principal,
                settings=HttpSettings(dev=True),
                manage_runtime=False,
            )
            parent = rt.session("p1")
            sub = await parent.submit("go")
            question = await surfaced(parent)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                reply = await client.post("/sessions/p1/answer", json={"answer": "allow"})
            assert reply.status_code == 200, reply.text
            assert reply.json()["submissionId"] == question.submission_id
            assert (await parent.wait(sub.id, timeout=10)).result == "lead: a is known"
            assert looked_up == ["a"]

    run(main(), timeout=30)
