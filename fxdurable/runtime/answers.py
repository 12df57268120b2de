"""Answering a turn's question (``session.answer``, ``POST /sessions/{id}/answer``).

A turn waits for input when its ``before_tool`` hook returned ``ask(question)`` or, with
``Durability(on_exhausted="ask")``, when its attempts ran out. The answer is checked here
against the question (a rewrite's input must validate against the tool the question is
about), recorded by one journal transition, and the caller then enqueues the wake that
resumes the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fxdurable.core.asking import waits_for_input
from fxdurable.core.journal import Journal
from fxdurable.core.records import SubmissionRecord
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.store import ReadView
from fxdurable.errors import (
    InvalidAnswerError,
    NoPendingQuestionError,
    SessionNotFoundError,
    ToolInputError,
)
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.hooks import Answer, allow, deny, rewrite

__all__ = ["Question", "answer_of", "pending_question", "record_answer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """The question a session's turn waits on: ``about`` is ``"tool"`` (``tool`` and
    ``task_id`` name the call; ``arguments`` is its input as the model wrote it) or
    ``"exhausted"`` (its attempt budget ran out) or ``"budget"`` (its spending budget is
    spent, ``SpendingBudget(on_exhausted="ask")``).

    ``session_id`` is the session that asks: the one asked about, or — surfaced on the
    parent — a subagent's child session whose question the parent's call waits on
    (``submission_id`` is then the child's). Answering the parent answers it."""

    session_id: str
    submission_id: str
    question: str
    about: str
    tool: str | None
    task_id: str | None
    arguments: str | None
    asked_at: float


def answer_of(kind: str, reason: str | None, input: Mapping[str, Any] | None) -> Answer:
    """The answer a wire body describes (``POST /sessions/{id}/answer``); an ``input`` is for
    a rewrite alone, and a ``reason`` for a deny alone (InvalidAnswerError otherwise)."""
    if (input is not None) != (kind == "rewrite"):
        raise InvalidAnswerError("a rewrite needs its 'input', and only a rewrite takes one")
    if reason is not None and kind != "deny":
        raise InvalidAnswerError("only a deny takes a 'reason'")
    if kind == "allow":
        return allow()
    if kind == "deny":
        return deny() if reason is None else deny(reason)
    if kind == "rewrite" and input is not None:
        return rewrite(input)
    raise InvalidAnswerError(f"an answer is allow, deny or rewrite, not {kind!r}")


# How deep a question is looked for through subagent calls (a child's child's ...): far more
# than any agent nests, and a bound on the reads of a record that loops.
_MAX_DEPTH = 8


def pending_question(view: ReadView, session_id: str, *, _depth: int = 0) -> Question | None:
    """The question the session's next submission waits on, if it waits; else one a
    subagent's child asks while this session's running call waits for that child."""
    unsettled = view.unsettled_submissions(session_id)
    if not unsettled:
        return None
    sub = unsettled[0]
    if not waits_for_input(sub):
        if _depth >= _MAX_DEPTH:
            return None
        for call in view.tool_tasks(sub.id):
            if call.status == ToolTaskStatus.RUNNING and call.child_session is not None:
                child = pending_question(view, call.child_session, _depth=_depth + 1)
                if child is not None:
                    return child
        return None
    request = sub.input_request
    assert request is not None  # waits_for_input
    task = None if request.task_id is None else view.get_tool_task(request.task_id)
    return Question(
        session_id=session_id,
        submission_id=sub.id,
        question=request.question,
        about=request.about,
        tool=request.tool,
        task_id=request.task_id,
        arguments=None if task is None else task.arguments,
        asked_at=request.asked_at,
    )


def record_answer(
    journal: Journal,
    agents: Mapping[str, Agent],
    session_id: str,
    answer: Answer,
    *,
    owner: str | None = None,
) -> SubmissionRecord:
    """Check ``answer`` against the pending question and record it (sync: one crossing).
    The question may be a subagent's child's, surfaced on ``session_id``
    (:func:`pending_question`): the answer is then the child's, and the returned submission
    (whose ``session_id`` the caller wakes) is the child's. ``owner`` is checked on
    ``session_id``: who may answer the parent may answer the child it runs.

    Raises :class:`SessionNotFoundError` (no such session, or ``owner``'s it is not),
    :class:`NoPendingQuestionError` (nothing waits: never asked, or answered already) and
    :class:`InvalidAnswerError` (a rewrite whose input does not validate, or of a question
    that is not about a call). Nothing is written unless it returns."""
    if not isinstance(answer, Answer):
        raise InvalidAnswerError(
            f"answer with fx.allow(), fx.deny(reason) or fx.rewrite(input), not {answer!r}"
        )
    session, question = journal.read(
        lambda v: (v.get_session(session_id), pending_question(v, session_id))
    )
    if session is None or (owner is not None and session.owner != owner):
        raise SessionNotFoundError(session_id)
    if question is None:
        raise NoPendingQuestionError(session_id)
    agent = session.agent
    if question.session_id != session_id:  # a child's, surfaced on its parent
        child = journal.read(lambda v: v.get_session(question.session_id))
        if child is None:
            raise NoPendingQuestionError(session_id)
        agent, owner = child.agent, None  # the owner was checked on the parent above
    arguments = answer.arguments_json()
    if answer.kind == "rewrite":
        _validate_rewrite(agents.get(agent), question, arguments or "{}")
    return journal.answer_input(
        question.session_id,
        answer.kind,
        reason=answer.reason,
        arguments=arguments,
        task_id=question.task_id,
        owner=owner,
    )


def _validate_rewrite(agent: Agent | None, question: Question, arguments: str) -> None:
    if question.about != "tool" or question.tool is None:
        raise InvalidAnswerError(
            "this question is about a spent budget, not a tool call: answer allow or deny"
        )
    tool = None if agent is None else agent.tool(question.tool)
    if tool is None:
        raise InvalidAnswerError(
            f"tool {question.tool!r} is not declared by this process's agent, so a rewrite "
            "of its input cannot be checked: answer allow or deny"
        )
    try:
        tool.parse(arguments)
    except ToolInputError as exc:
        raise InvalidAnswerError(f"the rewritten input does not fit {tool.name}: {exc}") from None
