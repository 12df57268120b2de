"""The conversation the model reads, rebuilt from the records.

User and assistant messages are append-only records; each tool result is read from its task,
in the position order of the call (never completion order).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from fxdurable.core.records import MessageRecord, ToolTaskRecord
from fxdurable.core.states import is_terminal
from fxdurable.runtime.models.base import ChatMessage

__all__ = ["build_history", "call_id"]


def call_id(task: ToolTaskRecord) -> str:
    """The id a provider sees for a call: its own if it gave one, else ours (positional)."""
    return task.provider_id or task.id


def build_history(
    messages: Sequence[MessageRecord], tasks: Sequence[ToolTaskRecord]
) -> list[ChatMessage]:
    by_round: dict[tuple[str, int], list[ToolTaskRecord]] = defaultdict(list)
    for task in tasks:
        by_round[(task.turn_id, task.round)].append(task)
    history: list[ChatMessage] = []
    for message in messages:
        if message.role == "user":
            history.append(ChatMessage(role="user", text=message.text))
            continue
        round_tasks = sorted(
            by_round.get((message.turn_id, message.round or 0), []), key=lambda t: t.index
        )
        calls = tuple(
            call.__class__(name=call.name, arguments=call.arguments, provider_id=call_id(task))
            for call, task in zip(message.tool_calls, round_tasks, strict=False)
        )
        history.append(ChatMessage(role="assistant", text=message.text, tool_calls=calls))
        for task in round_tasks:
            if is_terminal(task.status):
                history.append(
                    ChatMessage(
                        role="tool",
                        text=task.result or "",
                        tool_call_id=call_id(task),
                        tool_name=task.tool,
                    )
                )
    return history
