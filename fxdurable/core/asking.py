"""Questions a turn asks a person (``needs_input``): what the records say about them.

A submission *waits for input* while its latest :class:`~fxdurable.core.records.InputRequest`
has no answer and no abort was asked for it. It stays ``running`` (its turn started), but
holds no attempt and no lease, and no worker or scan runs it until the answer is recorded
(``Journal.answer_input``); the submissions admitted after it wait behind it. This is a field
rather than a new submission status on purpose: every store indexes unsettled submissions by
status (``queued``/``running``), and a question does not settle anything.
"""

from __future__ import annotations

from typing import Literal

from fxdurable.core.records import SubmissionRecord

__all__ = [
    "ANSWER_KINDS",
    "TIMEOUT_ANSWERS",
    "AnswerKind",
    "Asked",
    "OnTimeout",
    "expired_question",
    "question_due_at",
    "waits_for_input",
]

AnswerKind = Literal["allow", "deny", "rewrite"]
ANSWER_KINDS: frozenset[str] = frozenset({"allow", "deny", "rewrite"})
# What a question is about: a tool call a ``before_tool`` hook asked about, or a turn whose
# attempt budget ran out (``Durability(on_exhausted="ask")``), or a turn whose spending budget
# is spent (``SpendingBudget(on_exhausted="ask")``, :mod:`fxdurable.runtime.spend`).
Asked = Literal["tool", "exhausted", "budget"]
# What an expired question is answered with: ``deny`` and ``allow`` as a person would;
# ``fail`` settles the turn ``failed`` (code ``question_timeout``).
OnTimeout = Literal["deny", "allow", "fail"]
TIMEOUT_ANSWERS: frozenset[str] = frozenset({"deny", "allow", "fail"})


def waits_for_input(sub: SubmissionRecord) -> bool:
    """The submission waits for a person's answer: no worker may run it now. An abort
    intent ends the wait (the turn settles ``aborted`` without an answer)."""
    request = sub.input_request
    return request is not None and request.answer is None and not sub.abort_requested


def question_due_at(sub: SubmissionRecord) -> float | None:
    """When the question ``sub`` waits on expires: the session's timer, which the scan and
    a delayed wake honour. None when it waits for nothing or its question never expires."""
    if not waits_for_input(sub):
        return None
    request = sub.input_request
    assert request is not None  # waits_for_input
    return request.expires_at


def expired_question(sub: SubmissionRecord, now: float) -> bool:
    """The question ``sub`` waits on is past its expiry and nobody answered it yet: the
    next worker or scan to look records its timeout answer (``Journal.expire_input``)."""
    due = question_due_at(sub)
    return due is not None and due <= now
