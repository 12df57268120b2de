"""``HeldView``: the holder's own records answer a conversation update only when complete."""

from __future__ import annotations

import pytest

from fxdurable.core.records import MessageRecord, SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.runtime.held_view import HeldView, NeedsRead


def _message(seq: int) -> MessageRecord:
    return MessageRecord(session_id="s1", seq=seq, turn_id="t", role="assistant", text=f"m{seq}")


def _session(next_message_seq: int) -> SessionRecord:
    return SessionRecord(
        id="s1",
        agent="a",
        status=SessionStatus.ACTIVE,
        created_at=1.0,
        next_message_seq=next_message_seq,
    )


def test_held_messages_answer_when_they_hold_every_seq_to_the_last() -> None:
    view = HeldView(_session(next_message_seq=6), [_message(s) for s in (3, 4, 5)])
    assert [m.seq for m in view.messages("s1", after=3)] == [4, 5]
    assert view.messages("s1", after=5) == []
    assert view.get_session("s1") == _session(next_message_seq=6)


@pytest.mark.parametrize(
    ("held", "after", "next_seq"),
    [
        ((3, 5), 2, 6),  # a gap: seq 4 is someone else's
        ((3, 4), 2, 6),  # the last one (5) is not held
        ((4, 5), 2, 6),  # the first one after the cursor (3) is not held
        ((4, 5), 2, 1_000_000),  # a cursor far behind the session's last
    ],
)
def test_anything_short_of_complete_is_read_from_the_store(
    held: tuple[int, ...], after: int, next_seq: int
) -> None:
    view = HeldView(_session(next_message_seq=next_seq), [_message(s) for s in held])
    with pytest.raises(NeedsRead):
        view.messages("s1", after=after)


def test_other_sessions_rounds_and_reads_are_refused() -> None:
    view = HeldView(_session(next_message_seq=1), [])
    for read in (
        lambda: view.get_session("s2"),
        lambda: view.messages("s2"),
        lambda: view.tool_tasks("t", 0),  # no round is known
        lambda: view.session_tool_tasks("s1"),
    ):
        with pytest.raises(NeedsRead):
            read()
