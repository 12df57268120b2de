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

__all__ = ["ANSWER_KINDS", "AnswerKind", "Asked", "waits_for_input"]

AnswerKind = Literal["allow", "deny", "rewrite"]
ANSWER_KINDS: frozenset[str] = frozenset({"allow", "deny", "rewrite"})
# What a question is about: a tool call a ``before_tool`` hook asked about, or a turn whose
# attempt budget ran out (``Durability(on_exhausted="ask")``), or a turn whose spending budget
# is spent (``SpendingBudget(on_exhausted="ask")``, :mod:`fxdurable.runtime.spend`).
Asked = Literal["tool", "exhausted", "budget"]


def waits_for_input(sub: SubmissionRecord) -> bool:
    """The submission waits for a person's answer: no worker may run it now. An abort
    intent ends the wait (the turn settles ``aborted`` without an answer)."""
    request = sub.input_request
    return request is not None and request.answer is None and not sub.abort_requested
