"""Racing writers: real processes committing to one session of one store at once.

Each writer process opens the store by its URL and makes ``commits`` transactions, each of
which reads the session, writes it back one version on (``expected_version`` the one it
read) and appends the event whose ``seq`` is the version it read, naming itself. The store's
contract says what may happen: a transaction either commits (it, and nobody else, took that
version) or raises :class:`~fxdurable.errors.ConflictError` (nothing of it written); a store
may re-run a body whose reads went stale before it commits. So afterwards the session's
version is one more than the commits that won, every version has exactly one event, and each
event is the one its writer reported as won. A lost update (two writers both taking a version)
or a half-written transaction breaks one of those.

``race(url, ...)`` runs it and returns what each writer reported; ``check_race(store, ...)``
returns what is wrong (empty: nothing). The writers open the store with ``opener``,
``"module:function"`` taking the URL: ``"fxdurable.backends:open_store"`` for ours, a function
of your own for a store ``open_store`` does not know. (Named, not imported here: the testing
layer does not open stores.)
``python -m fxdurable.testing.store_race`` is the writer process itself.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from fxdurable.core.codec import JsonObject
from fxdurable.core.records import EventRecord, SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.errors import ConflictError

if TYPE_CHECKING:
    from fxdurable.core.store import Store, Tx

__all__ = ["RaceReport", "check_race", "interleavings", "race", "seed_race"]

EVENT = "contract.race"


@dataclass(frozen=True, slots=True)
class RaceReport:
    """What one writer saw: the versions its commits took, and how many raised a conflict."""

    writer: str
    won: tuple[int, ...]
    conflicts: int


def interleavings(reports: Sequence[RaceReport]) -> int:
    """How often the version sequence passes from one writer to another: 1 for two writers
    that ran one after the other, more for a race that raced."""
    owner = sorted((v, r.writer) for r in reports for v in r.won)
    return sum(1 for (_, a), (_, b) in itertools.pairwise(owner) if a != b)


def seed_race(store: Store, session_id: str) -> None:
    """The session the writers race on, at version 1."""
    session = SessionRecord(
        id=session_id, agent="race", status=SessionStatus.ACTIVE, created_at=0.0
    )
    store.transact(lambda tx: tx.put_session(session, expected_version=None))


def race(
    url: str,
    session_id: str,
    *,
    writers: int = 2,
    commits: int = 50,
    opener: str,
    hold_s: float = 0.002,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> list[RaceReport]:
    """Start ``writers`` processes and run ``commits`` rounds: in each, every writer is
    released at once (a line on its stdin) to make one commit, and says how it ended. Each
    holds its transaction ``hold_s`` between its read and its write, so the writers of a
    round read the same version. Returns their reports; raises ``AssertionError`` with a
    writer's stderr if one fails."""
    command = [sys.executable, "-m", "fxdurable.testing.store_race", "--opener", opener]
    command += ["--hold-s", str(hold_s)]
    procs = [
        subprocess.Popen(
            [*command, url, session_id, f"w{n}", str(commits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
        )
        for n in range(writers)
    ]
    try:
        for proc in procs:  # each has opened the store
            _expect(proc, "ready", timeout_s)
        won: list[list[int]] = [[] for _ in procs]
        conflicts = [0] * writers
        for _ in range(commits):  # a round: every writer commits once, released together
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            for n, proc in enumerate(procs):
                outcome = json.loads(_expect(proc, None, timeout_s))
                if outcome["won"] is None:
                    conflicts[n] += 1
                else:
                    won[n].append(int(outcome["won"]))
        for proc in procs:
            _, err = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise AssertionError(f"a writer exited {proc.returncode}:\n{err}")
        return [RaceReport(f"w{n}", tuple(won[n]), conflicts[n]) for n in range(writers)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def check_race(
    store: Store, session_id: str, reports: Sequence[RaceReport], *, commits: int
) -> list[str]:
    """What the race's records and reports break of the contract (empty: nothing)."""
    problems = []
    session, events = store.read(
        lambda view: (view.get_session(session_id), list(view.events(session_id)))
    )
    if session is None:
        return [f"session {session_id} is gone"]
    won = sorted(v for r in reports for v in r.won)
    for report in reports:
        if len(report.won) + report.conflicts != commits:
            problems.append(
                f"{report.writer}: {len(report.won)} won + {report.conflicts} conflicts, "
                f"not {commits}"
            )
    if len(set(won)) != len(won):
        taken = sorted({v for v in won if won.count(v) > 1})
        problems.append(f"versions taken by two commits (a lost update): {taken}")
    if session.version != 1 + len(won):
        problems.append(f"the session is at version {session.version} after {len(won)} commits")
    race_events = [e for e in events if e.type == EVENT]
    if [e.seq for e in race_events] != list(range(1, 1 + len(won))):
        problems.append(f"event seqs {[e.seq for e in race_events]} are not 1..{len(won)}")
    owner = {v: r.writer for r in reports for v in r.won}
    for event in race_events:
        if owner.get(event.seq) != event.data.get("writer"):
            problems.append(
                f"event {event.seq} names {event.data.get('writer')}, but "
                f"{owner.get(event.seq)} reported that version as won"
            )
    return problems


def _commit(session_id: str, writer: str, n: int, hold_s: float) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        session = tx.get_session(session_id)
        assert session is not None, f"no session {session_id}"
        version = session.version
        # Between the read and the write: widens the window in which the other writer
        # commits, so an optimistic store's conflict check is exercised, not just its luck.
        time.sleep(hold_s)
        tx.put_session(replace(session, version=version + 1), expected_version=version)
        data: JsonObject = {"writer": writer, "n": n}
        tx.append_event(
            EventRecord(
                session_id=session_id, seq=version, type=EVENT, turn_id=None, data=data, at=0.0
            )
        )
        return version

    return body


def _expect(proc: subprocess.Popen[str], line: str | None, timeout_s: float) -> str:
    """The writer's next line (``line``, if given, is what it must be); its stderr if not."""
    assert proc.stdout is not None
    got = proc.stdout.readline()
    if not got or (line is not None and got.strip() != line):
        proc.kill()
        _, err = proc.communicate(timeout=timeout_s)
        raise AssertionError(f"a writer said {got!r}, not {line or 'an outcome'}:\n{err}")
    return got


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One racing writer (see the module).")
    parser.add_argument("--opener", required=True, help="module:function taking the URL")
    parser.add_argument("url")
    parser.add_argument("session_id")
    parser.add_argument("writer")
    parser.add_argument("commits", type=int)
    parser.add_argument("--hold-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    module, _, name = args.opener.partition(":")
    open_store = cast("Callable[[str], Store]", getattr(importlib.import_module(module), name))
    store = open_store(args.url)
    try:
        print("ready", flush=True)
        for n in range(args.commits):
            sys.stdin.readline()  # every writer goes at once, once per round
            try:
                won: int | None = store.transact(
                    _commit(args.session_id, args.writer, n, args.hold_s)
                )
            except ConflictError:
                won = None  # nothing of it written: check_race holds the store to that
            print(json.dumps({"won": won}), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
