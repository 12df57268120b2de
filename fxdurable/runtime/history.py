"""The conversation the model reads, rebuilt from the records.

User and assistant messages are append-only records; each tool result is read from its task,
in the position order of the call (never completion order). After a compaction, the latest
summary stands for every message it covers: the model gets the summary with its instructions
and only the messages after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fxdurable.core.records import MessageRecord, ToolTaskRecord
from fxdurable.core.states import is_terminal
from fxdurable.core.store import ReadView
from fxdurable.runtime.attachments import from_ref
from fxdurable.runtime.models.base import INTERRUPTED_NOTE, ChatMessage

__all__ = ["History", "build_history", "call_id", "conversation", "with_summary"]

SUMMARY_HEADING = "Summary of the earlier conversation (older messages were compacted):"


@dataclass(frozen=True, slots=True)
class History:
    summary: str | None
    messages: list[ChatMessage]
    # Whether a message holds a stored attachment, whose bytes are still to load: known as the
    # history is built, so a model step of a long session need not scan every message for it.
    stored_attachments: bool = False


def call_id(task: ToolTaskRecord) -> str:
    """The id a provider sees for a call: its own if it gave one, else ours (positional)."""
    return task.provider_id or task.id


def with_summary(instructions: str, summary: str | None) -> str:
    if summary is None:
        return instructions
    return f"{instructions}\n\n{SUMMARY_HEADING}\n{summary}".lstrip()


def build_history(
    messages: Sequence[MessageRecord], tasks: Sequence[ToolTaskRecord], *, compact: bool = True
) -> History:
    """What the model is sent; ``compact=False`` gives every message as people read it.

    A reply a crash cut off mid-stream is an assistant message marked ``interrupted``; the
    model (not people) also reads :data:`INTERRUPTED_NOTE` right after it, every time, so
    the conversation's prefix stays the same from one request to the next.
    A stored image or document is a :class:`~fxdurable.runtime.attachments.StoredAttachment`
    here (its digest): its bytes are loaded after the read (``AttachmentLoader``).
    """
    by_round: dict[tuple[str, int], list[ToolTaskRecord]] = defaultdict(list)
    for task in tasks:
        by_round[(task.turn_id, task.round)].append(task)
    summaries = [m for m in messages if m.role == "summary"]
    latest = summaries[-1] if summaries and compact else None
    cutoff = (latest.summarizes_upto or 0) if latest is not None else 0
    history: list[ChatMessage] = []
    stored = False
    for message in messages:
        if message.role == "summary" or message.seq <= cutoff:
            continue
        if message.role == "user":
            attached = tuple(from_ref(ref) for ref in message.attachments)
            stored = stored or any(ref.digest is not None for ref in message.attachments)
            history.append(ChatMessage(role="user", text=message.text, attachments=attached))
            continue
        if message.interrupted:  # its round's tool calls belong to the round's answer
            history.append(ChatMessage(role="assistant", text=message.text, interrupted=True))
            if compact:
                history.append(ChatMessage(role="user", text=INTERRUPTED_NOTE))
            continue
        round_tasks = sorted(
            by_round.get((message.turn_id, message.round or 0), []), key=lambda t: t.index
        )
        calls = tuple(
            replace(call, provider_id=call_id(task))  # provider parts kept, as recorded
            for call, task in zip(message.tool_calls, round_tasks, strict=False)
        )
        history.append(
            ChatMessage(
                role="assistant", text=message.text, tool_calls=calls, content=message.content
            )
        )
        for task in round_tasks:
            if is_terminal(task.status):
                stored = stored or any(ref.digest is not None for ref in task.attachments)
                history.append(
                    ChatMessage(
                        role="tool",
                        text=task.result or "",
                        tool_call_id=call_id(task),
                        tool_name=task.tool,
                        attachments=tuple(from_ref(ref) for ref in task.attachments),
                    )
                )
    summary = latest.text if latest is not None else None
    return History(summary=summary, messages=history, stored_attachments=stored)


def conversation(view: ReadView, session_id: str) -> list[ChatMessage]:
    """Every message of the session, uncompacted, as people read it (history routes, trace)."""
    return build_history(
        view.messages(session_id), view.session_tool_tasks(session_id), compact=False
    ).messages
