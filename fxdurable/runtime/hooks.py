"""Tool hooks: ``before_tool`` (allow, deny, or ask a person) and ``after_tool``.

``before_tool(tool_name, arguments_json)`` runs before a call's intent is recorded (DESIGN
§3.11), so a crash inside it leaves nothing unknown. A hook that takes a third parameter,
``before_tool(tool_name, arguments_json, call)``, is also shown the :class:`ToolCall` (its
session, task and execution ids), for decisions that depend on the session (a permission
granted for the rest of a session, a plan mode). It returns None (allow), a string (deny:
the model reads it), or :func:`ask` (a question for a person: the turn waits, durably and
holding no lease, until ``session.answer(allow() | deny(reason) | rewrite(input))``).

``after_tool(call, result)`` runs once a call's execution returned (``completed``) or raised
(``failed``), before the result is committed: what it returns is what is recorded, so the
model reads it, after any crash too. None keeps the result. It does not run for a call that
never executed (invalid input, a denial) nor for an interrupted one (cancelled, timed out,
``outcome_unknown``): those results are fxdurable's own account, not the tool's. An exception
in it is logged (tool and task, never arguments or result) and the original result is kept:
the effect already happened, and a broken hook must not turn it into a lost result.

Both may be plain functions or coroutine functions.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from fxdurable.core.asking import TIMEOUT_ANSWERS, AnswerKind, OnTimeout
from fxdurable.core.records import ToolTaskRecord
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import ConfigurationError, InvalidAnswerError

__all__ = [
    "AfterTool",
    "Answer",
    "Ask",
    "BeforeTool",
    "ToolCall",
    "allow",
    "ask",
    "deny",
    "rewrite",
    "run_after_tool",
    "run_before_tool",
]

log = logging.getLogger("fxdurable.hooks")


@dataclass(frozen=True, slots=True)
class Ask:
    """``before_tool``'s third answer: ask a person ``question`` before the call may run
    (within ``timeout_s``, if set; then ``on_timeout`` answers)."""

    question: str
    timeout_s: float | None = None
    on_timeout: OnTimeout = "deny"


def ask(question: str, *, timeout_s: float | None = None, on_timeout: OnTimeout = "deny") -> Ask:
    """Return this from ``before_tool`` to ask a person first (``session.answer`` replies).

    ``timeout_s``: the question expires that many seconds after it is asked, durably (a
    timer on the session, honoured by a delayed wake and by the scan, so it fires after a
    restart too); it is then answered ``on_timeout``: ``"deny"`` (the model reads that
    nobody answered), ``"allow"`` (the call runs) or ``"fail"`` (the turn settles
    ``failed``, code ``question_timeout``). A person's answer and the expiry race safely:
    exactly one is recorded."""
    if not isinstance(question, str) or not question.strip():
        raise ConfigurationError("ask() needs the question to show a person")
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigurationError(f"ask()'s timeout_s is a positive number, not {timeout_s!r}")
    if on_timeout not in TIMEOUT_ANSWERS:
        raise ConfigurationError(f"on_timeout is 'deny', 'allow' or 'fail', not {on_timeout!r}")
    return Ask(question, timeout_s, on_timeout)


@dataclass(frozen=True, slots=True)
class Answer:
    """A person's answer to a turn's question: build one with :func:`allow`, :func:`deny`
    or :func:`rewrite`."""

    kind: AnswerKind
    reason: str | None = None
    input: Mapping[str, Any] | None = None

    def arguments_json(self) -> str | None:
        """A rewrite's input as the JSON text recorded on the call."""
        return None if self.input is None else json.dumps(dict(self.input), sort_keys=True)


def allow() -> Answer:
    """Let the call run as the model asked (or, for a spent attempt budget: try again)."""
    return Answer("allow")


def deny(reason: str = "denied by a person") -> Answer:
    """Refuse the call: the model reads ``denied: <reason>`` as its result (for a spent
    attempt budget: the turn settles ``failed``)."""
    return Answer("deny", reason=reason)


def rewrite(input: Mapping[str, Any]) -> Answer:
    """Run the call with ``input`` instead of the model's arguments (validated against the
    tool's input model when answered)."""
    if not isinstance(input, Mapping):
        raise InvalidAnswerError("rewrite() takes the call's new input as a mapping")
    return Answer("rewrite", input=input)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """The call ``after_tool`` is shown: which tool, with which arguments (JSON text), which
    task and execution, and whether it returned (``completed``) or raised (``failed``). A
    three-parameter ``before_tool`` is shown it too, before the call runs (``pending``)."""

    tool: str
    arguments: str
    task_id: str
    execution_id: str
    status: ToolTaskStatus
    # The session the call belongs to (its store key: a subagent's child has its own).
    session_id: str = ""
    # The session's state (``ctx.state``) as the turn last read or committed it: what a
    # ``before_tool`` decides from (a grant a person recorded with ``Journal.update_state``).
    state: Mapping[str, Any] = field(default_factory=dict)


# Sync or async; see the module docstring for what each may return.
BeforeTool: TypeAlias = (
    Callable[[str, str], "Awaitable[str | Ask | None] | str | Ask | None"]
    | Callable[[str, str, ToolCall], "Awaitable[str | Ask | None] | str | Ask | None"]
)
AfterTool: TypeAlias = Callable[[ToolCall, str], "Awaitable[str | None] | str | None"]


async def run_before_tool(
    hook: BeforeTool, task: ToolTaskRecord, state: Mapping[str, Any] | None = None
) -> str | Ask | None:
    """The hook's verdict on ``task``. Its exceptions propagate (the wake fails and the turn
    is recovered later, with nothing recorded for the call)."""
    if _takes_the_call(hook):
        call = _call_of(task, task.status, state)
        verdict = hook(task.tool, task.arguments, call)  # type: ignore[call-arg]
    else:
        verdict = hook(task.tool, task.arguments)  # type: ignore[call-arg]
    if inspect.isawaitable(verdict):
        verdict = await verdict
    if verdict is not None and not isinstance(verdict, str | Ask):
        raise ConfigurationError(
            f"before_tool returned a {type(verdict).__name__}; it returns None (allow), a "
            "reason (deny) or fx.ask(question)"
        )
    return verdict


async def run_after_tool(
    hook: AfterTool, task: ToolTaskRecord, status: ToolTaskStatus, result: str
) -> str:
    """What to record for ``task``'s result: the hook's text, or ``result`` itself when the
    hook returns None, returns something else than text, or raises (logged)."""
    call = _call_of(task, status)
    try:
        replaced = hook(call, result)
        if inspect.isawaitable(replaced):
            replaced = await replaced
    except Exception as exc:
        # The type only: a message may quote the arguments or the result, which may be secret.
        log.warning(
            "after_tool hook raised %s for %s (task %s); the original result is kept",
            type(exc).__name__,
            task.tool,
            task.id,
        )
        return result
    if replaced is None:
        return result
    if not isinstance(replaced, str):
        log.warning(
            "after_tool hook returned a %s for %s (task %s), not text; the original result is kept",
            type(replaced).__name__,
            task.tool,
            task.id,
        )
        return result
    return replaced


def _call_of(
    task: ToolTaskRecord, status: ToolTaskStatus, state: Mapping[str, Any] | None = None
) -> ToolCall:
    return ToolCall(
        tool=task.tool,
        arguments=task.arguments,
        task_id=task.id,
        execution_id=task.execution_id,
        status=status,
        session_id=task.session_id,
        state=state or {},
    )


def _takes_the_call(hook: BeforeTool) -> bool:
    """Whether ``hook`` takes a third positional parameter (the :class:`ToolCall`)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    # ``*args`` is not counted: a wrapper passing its arguments on keeps the two it had.
    return len(positional) >= 3
