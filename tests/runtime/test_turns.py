"""Happy turns: answers, tool calls in order, gap-free events, history, execution ids."""

from __future__ import annotations

import asyncio
import threading

import pydantic
from fxrt_support import FAST, assert_gap_free, check_invariants, fresh_store, read, run, tasks

import fxdurable as fx
from fxdurable.core.clock import execution_id


class Query(pydantic.BaseModel):
    q: str


class Deploy(pydantic.BaseModel):
    version: str


def test_text_answer(tmp_path):
    model = fx.ScriptedModel([fx.reply("hello there, this is a longer answer")], chunk_size=4)
    agent = fx.Agent("eng", model, instructions="be brief")

    async def main():
        # the URL form: this runtime owns (and closes) its store
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/x.db") as rt:
            s = rt.session("s1")
            text = await s.run("hi", timeout=10)
            assert text == "hello there, this is a longer answer"
            subs = read(rt, lambda v: v.submissions("s1"))
            assert len(subs) == 1
            assert subs[0].status.value == "completed"
            assert subs[0].result_text == text
            assert subs[0].attempts == 1 and subs[0].interruptions == 0
            history = await s.history()
            assert [(m.role, m.text) for m in history] == [("user", "hi"), ("assistant", text)]
            evs = assert_gap_free(rt, "s1")
            assert [e.type for e in evs] == [
                "session.created",
                "submission.admitted",
                "turn.started",
                "attempt.started",
                "model.completed",
                "submission.completed",
            ]
            assert model.requests[0].instructions == "be brief"
            assert [(m.role, m.text) for m in model.requests[0].messages] == [("user", "hi")]
            # events() pages with a cursor
            first = await s.events(limit=2)
            assert [e.seq for e in first] == [1, 2]
            rest = await s.events(after=first[-1].seq)
            assert [e.seq for e in rest] == list(range(3, len(evs) + 1))
            await check_invariants(rt, "s1")

    run(main())


def test_tool_calls_in_order_sync_and_async(tmp_path):
    log: list[str] = []
    seen: list[tuple[str, str, str, int, bool]] = []
    main_thread = threading.main_thread()

    @fx.tool
    def lookup(inp: Query, ctx: fx.ToolContext) -> dict[str, str]:
        "Look something up."
        log.append(f"lookup:{inp.q}")
        in_thread = threading.current_thread() is not main_thread
        seen.append((ctx.tool_name, ctx.execution_id, ctx.session_id, ctx.attempt, in_thread))
        return {"answer": inp.q.upper()}

    @fx.tool(replay="unsafe")
    async def deploy(inp: Deploy, ctx: fx.ToolContext) -> Deploy:
        "Deploy a version."
        await asyncio.sleep(0.01)
        log.append(f"deploy:{inp.version}")
        in_thread = threading.current_thread() is not main_thread
        seen.append((ctx.tool_name, ctx.execution_id, ctx.session_id, ctx.attempt, in_thread))
        return inp

    model = fx.ScriptedModel(
        [
            fx.reply(
                "checking",
                fx.call("lookup", q="a"),
                fx.call("deploy", version="1.4"),
                fx.call("lookup", q="b"),
            ),
            fx.reply("", fx.call("lookup", q="c")),
            fx.reply("done"),
        ]
    )
    agent = fx.Agent("eng", model, tools=[lookup, deploy])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            assert await s.run("ship it", timeout=10) == "done"
            assert log == ["lookup:a", "deploy:1.4", "lookup:b", "lookup:c"]
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            recorded = tasks(rt, sub.id)
            assert [(t.round, t.index, t.tool) for t in recorded] == [
                (0, 0, "lookup"),
                (0, 1, "deploy"),
                (0, 2, "lookup"),
                (1, 0, "lookup"),
            ]
            assert all(t.status.value == "completed" and t.runs == 1 for t in recorded)
            assert [t.policy for t in recorded] == ["safe", "unsafe", "safe", "safe"]
            # ctx.execution_id is the recorded one, derived from the call's position
            assert [x[1] for x in seen] == [t.execution_id for t in recorded]
            assert all(t.execution_id == execution_id(t.id) for t in recorded)
            assert len({t.execution_id for t in recorded}) == 4
            assert [x[0] for x in seen] == ["lookup", "deploy", "lookup", "lookup"]
            assert all(x[2] == "s1" and x[3] == 1 for x in seen)
            # sync tools run off the event loop's thread, async ones on it
            assert [x[4] for x in seen] == [True, False, True, True]
            assert [t.result for t in recorded] == [
                '{"answer": "A"}',
                '{"version":"1.4"}',
                '{"answer": "B"}',
                '{"answer": "C"}',
            ]

            history = await s.history()
            assert [(m.role, m.tool_name) for m in history] == [
                ("user", None),
                ("assistant", None),
                ("tool", "lookup"),
                ("tool", "deploy"),
                ("tool", "lookup"),
                ("assistant", None),
                ("tool", "lookup"),
                ("assistant", None),
            ]
            call_ids = [c.provider_id for c in history[1].tool_calls]
            assert call_ids == [t.id for t in recorded[:3]]
            assert [m.tool_call_id for m in history[2:5]] == call_ids
            assert [c.name for c in history[1].tool_calls] == ["lookup", "deploy", "lookup"]
            # the model read exactly the recorded conversation, in position order
            assert len(model.requests) == 3
            assert list(model.requests[1].messages) == history[:5]
            assert list(model.requests[2].messages) == history[:7]
            assert {t.name for t in model.requests[0].tools} == {"lookup", "deploy"}

            evs = assert_gap_free(rt, "s1")
            tool_events = [(e.type, e.data["task"]) for e in evs if e.type.startswith("tool.")]
            assert tool_events == [
                (kind, t.id) for t in recorded for kind in ("tool.started", "tool.completed")
            ]
            await check_invariants(rt, "s1")

    run(main())


def test_second_message_sees_the_whole_conversation(tmp_path):
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        return fx.reply(f"answer {sum(1 for m in request.messages if m.role == 'user')}")

    model = fx.ScriptedModel(policy)
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            assert await s.run("one", timeout=10) == "answer 1"
            assert await s.run("two", timeout=10) == "answer 2"
            assert [(m.role, m.text) for m in await s.history()] == [
                ("user", "one"),
                ("assistant", "answer 1"),
                ("user", "two"),
                ("assistant", "answer 2"),
            ]
            subs = read(rt, lambda v: v.submissions("s1"))
            assert [s_.seq for s_ in subs] == [1, 2]
            await check_invariants(rt, "s1")

    run(main())


def test_sessions_are_independent(tmp_path):
    model = fx.ScriptedModel(lambda req: fx.reply(f"echo {req.messages[-1].text}"))
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            results = await asyncio.gather(
                *(rt.session(f"s{n}").run(f"p{n}", timeout=10) for n in range(5))
            )
            assert results == [f"echo p{n}" for n in range(5)]
            for n in range(5):
                assert [m.text for m in await rt.session(f"s{n}").history()] == [
                    f"p{n}",
                    f"echo p{n}",
                ]
                await check_invariants(rt, f"s{n}")

    run(main())
