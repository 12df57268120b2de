"""What a caller sees of a submission: the public view of the journal's record.

The stored record (:class:`fxdurable.core.records.SubmissionRecord`) also carries the journal's
bookkeeping (admission order, row version, abort flag, timestamps), which may change with the
storage format; this view is what the runtime promises to callers of ``session.submit``,
``session.wait`` and ``session.submission``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fxdurable.core.asking import waits_for_input
from fxdurable.core.records import ErrorInfo, SubmissionRecord
from fxdurable.core.states import SubmissionStatus
from fxdurable.runtime.output import OutputSpec

__all__ = ["Submission"]

_SETTLED = frozenset(
    {SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.ABORTED}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """One admitted prompt, as of the moment it was read.

    ``cursor`` is the ``seq`` of its ``submission.admitted`` event, where its events start.
    ``result`` is the final answer once ``completed``; ``error`` says why once ``failed`` or
    ``aborted``. ``interruptions`` counts attempts that a crash ended (recovery continued
    each from its last committed step). ``question`` is what its turn asks a person while it
    waits for input (``needs_input``; answer with ``session.answer``), else None.
    ``output`` is a typed agent's validated answer (docs/typed-output.md).
    """

    id: str
    session_id: str
    request_id: str
    status: SubmissionStatus
    cursor: int
    attempts: int
    interruptions: int
    result: str | None
    error: ErrorInfo | None
    question: str | None = None
    # A typed final answer (``Agent(output_type=...)``): the validated value, decoded into the
    # agent's type; None otherwise. ``output_json`` is it as stored (JSON text).
    output: Any = None
    output_json: str | None = None

    @property
    def needs_input(self) -> bool:
        """Its turn waits for a person's answer (``session.answer``); nothing runs it now."""
        return self.question is not None

    @property
    def settled(self) -> bool:
        """Completed, failed or aborted: nothing about it will change any more."""
        return self.status in _SETTLED

    @classmethod
    def of(cls, record: SubmissionRecord, output: OutputSpec | None = None) -> Submission:
        """The view of ``record``; ``output`` decodes its typed answer (the agent's)."""
        return cls(
            output=None if output is None or record.output is None else output.load(record.output),
            output_json=record.output,
            id=record.id,
            session_id=record.session_id,
            request_id=record.request_id,
            status=record.status,
            cursor=record.cursor,
            attempts=record.attempts,
            interruptions=record.interruptions,
            result=record.result_text,
            error=record.error,
            question=record.input_request.question
            if waits_for_input(record) and record.input_request is not None
            else None,
        )
