"""``ResultGroup``: a batch's results that arrive together share one commit (runtime/batch.py).

Event-driven: the commit function runs in the crossing's thread and is held on a
``threading.Event`` where a test needs a commit in flight; nothing sleeps."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fxdurable.runtime.batch import ResultGroup, TurnCrossings


class Commits:
    """A commit function that records each group, and may be held while it runs."""

    def __init__(self, *, hold_first: bool = False, fail: BaseException | None = None) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.fail = fail

    def __call__(self, items: list[str]) -> list[str]:
        self.groups.append(list(items))
        self.entered.set()
        self.release.wait(timeout=10)
        if self.fail is not None:
            raise self.fail
        return [f"{item} committed" for item in items]


def test_results_submitted_in_one_turn_of_the_loop_are_one_commit() -> None:
    commits = Commits()

    async def main() -> list[str]:
        group: ResultGroup[str, str] = ResultGroup(TurnCrossings(), commits)
        return await asyncio.gather(*(group.submit(name) for name in "abc"))

    assert asyncio.run(main()) == ["a committed", "b committed", "c committed"]
    assert commits.groups == [["a", "b", "c"]]


def test_results_arriving_while_a_commit_is_in_flight_make_the_next() -> None:
    commits = Commits(hold_first=True)

    async def main() -> list[str]:
        group: ResultGroup[str, str] = ResultGroup(TurnCrossings(), commits)
        first = asyncio.ensure_future(group.submit("a"))
        await asyncio.to_thread(commits.entered.wait, 10)  # "a" commits alone, held
        later = [asyncio.ensure_future(group.submit(name)) for name in "bc"]
        await asyncio.sleep(0)  # both queued behind the commit in flight
        commits.release.set()
        return await asyncio.gather(first, *later)

    assert asyncio.run(main()) == ["a committed", "b committed", "c committed"]
    assert commits.groups == [["a"], ["b", "c"]]


def test_a_commit_that_raises_raises_for_each_of_its_results() -> None:
    commits = Commits(fail=LookupError("lost the store"))

    async def main() -> list[BaseException | str]:
        group: ResultGroup[str, str] = ResultGroup(TurnCrossings(), commits)
        return await asyncio.gather(*(group.submit(n) for n in "ab"), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes] == [LookupError, LookupError]
    assert commits.groups == [["a", "b"]]


def test_a_caller_that_stops_waiting_leaves_the_others_their_results() -> None:
    commits = Commits(hold_first=True)

    async def main() -> str:
        group: ResultGroup[str, str] = ResultGroup(TurnCrossings(), commits)
        gone = asyncio.ensure_future(group.submit("a"))
        kept = asyncio.ensure_future(group.submit("b"))
        await asyncio.to_thread(commits.entered.wait, 10)
        gone.cancel()
        commits.release.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await kept

    assert asyncio.run(main()) == "b committed"
    assert commits.groups == [["a", "b"]]
