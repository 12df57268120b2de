"""Journal flows on the store: steering, durable steps, questions, state, forks, subagents.

Part of :class:`~fxdurable.testing.store_contract.StoreContract`: each test takes the ``store``
fixture the subclass provides."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import pytest

from fxdurable.core.records import (
    ToolCallRequest,
    ToolTaskRecord,
    Usage,
)
from fxdurable.core.states import (
    SessionStatus,
    ToolTaskStatus,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.testing.store_contract.builders import (
    a_task,
    look,
    write,
)

if TYPE_CHECKING:
    from fxdurable.core.journal import Fence, Journal

__all__ = ["FlowContract"]


def _one_pending_call(
    store: Store, tool: str, arguments: str
) -> tuple[Journal, Fence, ToolTaskRecord]:
    """Through the journal: session s1's turn, whose first model call asked for one unsafe
    ``tool`` call, still pending. Returns the journal, the worker's fence and the call."""
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal, WorkerIdentity
    from fxdurable.core.records import ToolCallRequest

    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    call = ToolCallRequest(name=tool, arguments=arguments)
    (task,) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=[call], policies=["unsafe"], usage=Usage()
    ).tasks
    return journal, fence, task


# -- forks on every backend (Journal.fork: reads of the source, writes of a new session) ----
def _run_turn(journal: Any, prompt: str, *, tool: bool) -> str:
    """One turn through the journal as a worker drives it: optionally a tool round, then an
    answer; returns the submission id."""
    from fxdurable.core.journal import WorkerIdentity

    sub = journal.admit("s1", agent="a", prompt=prompt).submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    start = journal.begin_attempt(fence, sub.id, worker="w")
    usage = Usage(input_tokens=1, output_tokens=1)
    round_ = 0
    if tool:
        call = ToolCallRequest(name="look", arguments="{}", provider_id=None)
        (task,) = journal.record_model_call(
            fence, start.turn.id, round_=0, text="looking", tool_calls=[call],
            policies=["unsafe"], usage=usage,
        ).tasks  # fmt: skip
        journal.start_tool(fence, task.id)
        journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "seen")
        round_ = 1
    journal.record_model_call(
        fence, start.turn.id, round_=round_, text=f"ok: {prompt}", tool_calls=[], policies=[],
        usage=usage,
    )  # fmt: skip
    journal.settle(fence, sub.id, "completed", text=f"ok: {prompt}")
    journal.release(fence)
    return str(sub.id)


class FlowContract:
    """See the module."""

    def test_tool_tasks_of_one_round(self, store: Store) -> None:
        """The turn loop reads only the current round's tasks: a step stays O(1) in a long turn."""

        def body(tx: Tx) -> None:
            for round_ in range(3):
                for index in (1, 0):
                    tx.put_tool_task(a_task("t1", round_, index), expected_version=None)

        write(store, body)
        got = look(store, lambda r: r.tool_tasks("t1", 1))
        assert [(t.round, t.index) for t in got] == [(1, 0), (1, 1)]
        assert look(store, lambda r: r.tool_tasks("t1", 7)) == []

    def test_steering_flows_through_the_journal_on_every_backend(self, store: Store) -> None:
        """Steer, deliver with a model call, complete: the session's steering field round-trips
        through each backend's transactions."""
        from fxdurable.core.clock import RandomIds, SystemClock
        from fxdurable.core.journal import Journal, WorkerIdentity

        journal = Journal(store, SystemClock(), RandomIds())
        sub = journal.admit("s1", agent="a", prompt="go", owner="alice").submission
        fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
        assert fence is not None
        journal.begin_attempt(fence, sub.id, worker="w")
        assert journal.steer("s1", "left", owner="alice").steered
        assert journal.steer("s1", "then right").steered
        journal.record_model_call(
            fence,
            sub.id,
            round_=0,
            text="ok",
            tool_calls=(),
            policies=(),
            usage=Usage(),
            steering=2,
        )
        journal.settle(fence, sub.id, "completed", text="ok")
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None and session.owner == "alice" and session.steering == ()
        texts = [(m.role, m.text) for m in store.read(lambda v: v.messages("s1"))]
        assert texts == [
            ("user", "go"),
            ("user", "left"),
            ("user", "then right"),
            ("assistant", "ok"),
        ]

    def test_durable_tool_steps_flow_through_the_journal_on_every_backend(
        self, store: Store
    ) -> None:
        """A durable call's steps (new optional fields of the tool task) round-trip through each
        backend's transactions, in the order they were recorded, with their events."""
        journal, fence, task = _one_pending_call(store, "provision", "{}")
        journal.start_tool(fence, task.id, durable=True)
        journal.record_step(fence, task.id, name="tenant", value='{"id":"t-1"}')
        journal.record_step(fence, task.id, name="dns", value='"a.example.com"')
        got = store.read(lambda v: v.get_tool_task(task.id))
        assert got is not None and got.durable and got.status == ToolTaskStatus.RUNNING
        assert [(s.name, s.value, s.run) for s in got.steps] == [
            ("tenant", '{"id":"t-1"}', 1),
            ("dns", '"a.example.com"', 1),
        ]
        events = store.read(lambda v: v.events("s1"))
        assert [e.data["step"] for e in events if e.type == "tool.step"] == ["tenant", "dns"]

    def test_questions_and_answers_flow_through_the_journal_on_every_backend(
        self, store: Store
    ) -> None:
        """A question (new optional fields of the submission and the tool task) round-trips
        through each backend's transactions: the waiting submission stays unsettled and is not
        work a release reports, the answer (a rewrite) lands on the call, and the events say so."""
        from fxdurable.core.asking import waits_for_input

        journal, fence, task = _one_pending_call(store, "deploy", '{"version": "1"}')
        journal.request_input(fence, task.turn_id, question="May I?", about="tool", task_id=task.id)
        assert journal.release(fence) is False
        (waiting,) = store.read(lambda v: v.unsettled_submissions("s1"))
        assert waits_for_input(waiting) and waiting.input_request is not None
        assert (waiting.input_request.question, waiting.input_request.task_id) == (
            "May I?",
            task.id,
        )
        journal.answer_input("s1", "rewrite", arguments='{"version": "2"}', task_id=task.id)
        (answered,) = store.read(lambda v: v.unsettled_submissions("s1"))
        assert not waits_for_input(answered)
        got = store.read(lambda v: v.get_tool_task(task.id))
        assert got is not None and got.answer is not None
        assert (got.answer.kind, got.arguments) == ("rewrite", '{"version": "2"}')
        types = [e.type for e in store.read(lambda v: v.events("s1"))]
        assert types[-3:] == ["attempt.yielded", "input.requested", "input.answered"]

    def test_persisted_state_flows_through_the_journal_on_every_backend(self, store: Store) -> None:
        """``ctx.state`` (a new optional field of the session record, and ``state.changed``
        events): committed with a durable step and with a result, merged per key, copied by a fork
        as of its point, and a state near its bound (64 KB) round-trips on every backend."""
        from fxdurable.core.clock import RandomIds, SystemClock
        from fxdurable.core.journal import Journal, WorkerIdentity
        from fxdurable.core.records import ToolCallRequest
        from fxdurable.core.session_state import MAX_STATE_BYTES, StateWrites
        from fxdurable.testing.invariants import check_store

        journal = Journal(store, SystemClock(), RandomIds())
        sub = journal.admit("s1", agent="a", prompt="go").submission
        fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
        assert fence is not None
        journal.begin_attempt(fence, sub.id, worker="w")
        calls = [ToolCallRequest(name="onboard", arguments="{}")] * 2
        (first, second) = journal.record_model_call(
            fence,
            sub.id,
            round_=0,
            text="",
            tool_calls=calls,
            policies=["unsafe"] * 2,
            usage=Usage(),
        ).tasks
        journal.start_tool(fence, first.id, durable=True)
        journal.record_step(
            fence, first.id, name="tenant", value='"t-1"', writes=StateWrites(set={"tenant": "t-1"})
        )
        journal.finish_tool(
            fence, first.id, ToolTaskStatus.COMPLETED, "ok", writes=StateWrites(set={"ready": True})
        )
        first_done = store.read(lambda v: v.get_session("s1"))
        assert first_done is not None
        after_first = first_done.next_event_seq - 1
        big = "x" * (MAX_STATE_BYTES - 200)  # the state stays just under its bound
        journal.start_tool(fence, second.id)
        journal.finish_tool(
            fence,
            second.id,
            ToolTaskStatus.COMPLETED,
            "ok",
            writes=StateWrites(
                set={"notes": big, "nested": {"a": [1, 2.5, None]}}, deleted=("tenant",)
            ),
        )
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None
        assert dict(session.state) == {"ready": True, "notes": big, "nested": {"a": [1, 2.5, None]}}
        events = store.read(lambda v: v.events("s1"))
        changes = [
            (sorted(cast("dict[str, Any]", e.data["set"])), e.data["deleted"])
            for e in events
            if e.type == "state.changed"
        ]
        assert changes == [(["tenant"], []), (["ready"], []), (["nested", "notes"], ["tenant"])]
        fork = journal.fork("s1", "s2", after=after_first)
        forked = store.read(lambda v: v.get_session("s2"))
        assert fork.created and forked is not None
        assert dict(forked.state) == {"tenant": "t-1", "ready": True}
        assert store.read(lambda v: check_store(v, now=time.time())).violations == ()

    def test_a_fork_is_one_transaction_of_copies_on_every_store(self, store: Store) -> None:
        from fxdurable.core.clock import RandomIds, SystemClock
        from fxdurable.core.journal import Journal
        from fxdurable.errors import SessionExistsError
        from fxdurable.testing.invariants import check_store

        journal = Journal(store, SystemClock(), RandomIds())
        first = _run_turn(journal, "my name is Ada", tool=True)
        _run_turn(journal, "I like tea", tool=False)
        fork = journal.fork("s1", "s2", after=first)
        assert (fork.created, fork.messages, fork.agent) == (True, 3, "a")
        assert journal.fork("s1", "s2", after=first).created is False
        with pytest.raises(SessionExistsError):
            journal.fork("s1", "s2")

        def copies(view: ReadView) -> tuple[Any, ...]:
            return (
                view.get_session("s2"),
                [(m.role, m.text) for m in view.messages("s2")],
                view.session_tool_tasks("s2"),
                view.events("s2"),
            )

        session, messages, tasks, events = store.read(copies)
        assert session.status == SessionStatus.IDLE and session.next_message_seq == 4
        assert messages == [
            ("user", "my name is Ada"),
            ("assistant", "looking"),
            ("assistant", "ok: my name is Ada"),
        ]
        assert [(t.status, t.result, t.session_id) for t in tasks] == [
            (ToolTaskStatus.COMPLETED, "seen", "s2")
        ]
        assert [e.type for e in events] == ["session.created"]
        assert store.read(lambda v: check_store(v, now=time.time(), at_rest=True)).violations == ()
        # The fork takes a next message of its own.
        second = journal.admit("s2", agent="a", prompt="what is my name?").submission
        assert second.session_id == "s2" and second.seq == 1

    # -- subagents on every backend (Journal.admit_child: two sessions in one transaction) -----
    def test_a_subagent_admission_links_parent_and_child_in_one_transaction_on_every_store(
        self,
        store: Store,
    ) -> None:
        """The child session, its submission and the parent call's ``child_session`` (new
        optional fields of the session and the tool task) are written in the parent's fenced
        transaction on each backend; a repeat finds the same submission and writes nothing; a
        stale parent fence writes nothing at all."""
        from fxdurable.core.clock import RandomIds, SystemClock
        from fxdurable.core.journal import Journal, WorkerIdentity
        from fxdurable.core.records import ToolCallRequest
        from fxdurable.core.subagent import child_request_id, child_session_id
        from fxdurable.errors import LeaseLostError
        from fxdurable.testing import check_store

        journal = Journal(store, SystemClock(), RandomIds())
        sub = journal.admit("alice/p1", agent="lead", prompt="go", owner="alice").submission
        fence = journal.claim("alice/p1", WorkerIdentity("h", 1), ttl_s=30)
        assert fence is not None
        journal.begin_attempt(fence, sub.id, worker="w")
        call = ToolCallRequest(name="research", arguments='{"task": "dig"}')
        (task,) = journal.record_model_call(
            fence,
            sub.id,
            round_=0,
            text="",
            tool_calls=[call],
            policies=["idempotent"],
            usage=Usage(),
        ).tasks
        journal.start_tool(fence, task.id)
        first = journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
        again = journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
        child_id = child_session_id("alice/p1", task.execution_id)
        assert (first.created, again.created, again.submission) == (True, False, first.submission)
        assert first.submission.session_id == child_id and child_id.startswith("alice/sub-x")
        assert first.submission.request_id == child_request_id(task.execution_id)
        child = store.read(lambda v: v.get_session(child_id))
        assert child is not None
        assert (child.owner, child.agent, child.parent_session, child.parent_task) == (
            "alice",
            "researcher",
            "alice/p1",
            task.id,
        )
        linked = store.read(lambda v: v.get_tool_task(task.id))
        assert linked is not None and linked.child_session == child_id
        [created, admitted] = store.read(lambda v: v.events(child_id))
        assert created.data["parent_task"] == task.id and admitted.type == "submission.admitted"
        assert store.read(lambda v: check_store(v, now=0.0)).violations == ()

        journal.heartbeat(fence, ttl_s=-1)  # the lease expires and another worker takes it over
        stale = journal.claim("alice/p1", WorkerIdentity("h2", 2), ttl_s=30)
        assert stale is not None and stale.token > fence.token
        before = store.read(lambda v: len(v.list_sessions()))
        with pytest.raises(LeaseLostError):
            journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
        assert store.read(lambda v: len(v.list_sessions())) == before
