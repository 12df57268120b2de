"""The Redis store's wire: its keys, one connection's round trips and the commit script.

Shared by the two transaction paths (:mod:`._redis_cached_tx`, the scripted one, and
:mod:`._redis_tx`, the WATCH/MULTI one) and the store (:mod:`fxdurable.stores.redis`): the
key layout and which session each key belongs to (:meth:`Keys.owner`, as the Lua scripts
resolve it), a :class:`Link` that sends commands in one write and reads every reply (one
round trip), and the ``EVALSHA`` of ``lua/commit.lua`` with what its reply means.

A commit whose answer is lost (the connection dropped after the request left, or no answer
within ``socket_timeout``) is an unknown outcome. Each commit carries a random token that the
script records with its reply (``lua/commit.lua``, for :data:`TOKEN_TTL_S`), so
:func:`resend` can send the same token again on a new connection, a bounded number of times,
and learn what the first one did instead of applying it twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis

from fxdurable.core.optimistic import Rerun
from fxdurable.errors import ConflictError, StoreError, StoreUnavailableError

__all__ = [
    "SCRIPT",
    "SCRIPT_SHA",
    "TOKEN_TTL_S",
    "Command",
    "Condition",
    "Disconnected",
    "Keys",
    "Link",
    "NoScript",
    "Op",
    "Rerun",
    "Unanswered",
    "commit_command",
    "commit_outcome",
    "new_token",
    "raise_errors",
    "resend",
    "text",
]

_BY_SESSION = frozenset({"session", "subs", "unsettled", "stasks", "msgs", "events"})
SCRIPT = resources.files("fxdurable.stores").joinpath("lua/commit.lua").read_bytes()
SCRIPT_SHA = hashlib.sha1(SCRIPT).hexdigest()
# How long a commit's recorded reply outlives it: longer than any resend waits (seconds) and
# than a request held in the network can still arrive (TCP gives up on a segment within
# about 15 minutes at most; 10 is DynamoDB's ClientRequestToken window).
TOKEN_TTL_S = 600
# Waits before each resend of a commit whose answer was lost: about 4 s in all, beside a
# restarting server's ~3 s (the store's reconnect delays) and one socket_timeout per try.
_RESEND_DELAYS = (0.0, 0.1, 0.3, 1.0, 2.5)

log = logging.getLogger("fxdurable.store")

Command = tuple[str | bytes | int | float, ...]


class Disconnected(BaseException):
    """The connection failed before anything was committed: safe to run the body again."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Unanswered(StoreUnavailableError):
    """A commit was sent and its answer never came: it may or may not have been applied."""


class NoScript(BaseException):
    """The server lost the commit script (a restart): load it and run the body again."""


@dataclass(frozen=True, slots=True)
class Keys:
    p: str

    @property
    def schema(self) -> str:
        return f"{self.p}:schema"

    @property
    def sessions(self) -> str:
        return f"{self.p}:sessions"

    @property
    def active(self) -> str:
        return f"{self.p}:sessions:active"

    @property
    def retention(self) -> str:
        return f"{self.p}:sessions:retention"

    def session(self, sid: str) -> str:
        return f"{self.p}:session:{sid}"

    def subs(self, sid: str) -> str:
        return f"{self.p}:subs:{sid}"

    def unsettled(self, sid: str) -> str:
        return f"{self.p}:unsettled:{sid}"

    def sub(self, sub_id: str) -> str:
        return f"{self.p}:sub:{sub_id}"

    def req(self, request_id: str) -> str:
        return f"{self.p}:req:{request_id}"

    def attempts(self, sub_id: str) -> str:
        return f"{self.p}:attempts:{sub_id}"

    def turn(self, turn_id: str) -> str:
        return f"{self.p}:turn:{turn_id}"

    def mcalls(self, turn_id: str) -> str:
        return f"{self.p}:mcalls:{turn_id}"

    def task(self, task_id: str) -> str:
        return f"{self.p}:task:{task_id}"

    def turn_tasks(self, turn_id: str) -> str:
        return f"{self.p}:turntasks:{turn_id}"

    def session_tasks(self, sid: str) -> str:
        return f"{self.p}:stasks:{sid}"

    def messages(self, sid: str) -> str:
        return f"{self.p}:msgs:{sid}"

    def events(self, sid: str) -> str:
        return f"{self.p}:events:{sid}"

    def blob(self, digest: str) -> str:
        return f"{self.p}:blob:{digest}"

    @property
    def blob_pattern(self) -> str:
        """The ``SCAN MATCH`` pattern of every blob key: a prefix is letters, digits and
        ``._-`` (:mod:`._redis_setup`), none of them a glob character, and holds no ``:``, so
        it matches no other store's keys and no other kind's."""
        return f"{self.p}:blob:*"

    def version(self, sid: str) -> str:
        """The session's version: bumped by every commit that writes one of its keys."""
        return f"{self.p}:sv:{sid}"

    def owner(self, key: str) -> tuple[str, str] | None:
        """Which session a key belongs to, as the Lua scripts resolve it: ``("s", sid)``,
        ``("o", record key)`` (the session_id of the JSON record there) or None (no one's)."""
        parts = key.split(":", 2)
        if len(parts) < 3:
            return None
        kind, ident = parts[1], parts[2]
        if kind in _BY_SESSION:
            return ("s", ident)
        if kind in ("sub", "turn", "task"):
            return ("o", key)
        if kind == "attempts":
            return ("o", self.sub(ident))
        if kind in ("mcalls", "turntasks"):
            return ("o", self.turn(ident))
        return None


@dataclass(frozen=True, slots=True)
class Condition:
    kind: str  # "k" string | "h" hash field | "z" zset score | "v" version | "r"/"f" raw
    key: str
    field: str
    expected: int | bytes | None  # None: must be absent
    what: str  # for the ConflictError message


Op = tuple[str, str, tuple[str | int | float, ...]]


def new_token() -> str:
    return secrets.token_hex(12)


def commit_command(
    keys: Keys,
    conditions: Sequence[Condition],
    ops: Sequence[Op],
    *,
    token: str = "",
    fence: bool = False,
) -> Command:
    """The ``EVALSHA`` of ``lua/commit.lua`` for these conditions and writes; every session
    a write touches gets its version bumped. With a ``token`` the script records its reply
    (and answers a resend with it); ``fence`` records "not applied" for a token not yet
    recorded and writes nothing else."""
    index: dict[str, int] = {}

    def ix(key: str) -> int:
        return index.setdefault(key, len(index) + 1)

    mode = "f" if fence else "c"
    argv: list[str | bytes | int | float] = [keys.p, token, TOKEN_TTL_S, mode, len(conditions)]
    for c in conditions:
        argv += [c.kind, ix(c.key), c.field, "" if c.expected is None else c.expected]
    owners = dict.fromkeys(o for _, key, _ in ops if (o := keys.owner(key)) is not None)
    argv.append(len(owners))
    for kind, arg in owners:
        argv += [kind, arg if kind == "s" else ix(arg)]
    for command, key, args in ops:
        argv += [len(args), command, ix(key), *args]
    return ("EVALSHA", SCRIPT_SHA, len(index), *index, *argv)


def commit_outcome(reply: Any, conditions: Sequence[Condition], where: str) -> dict[str, int]:
    """The new version of each session the commit bumped; raises what a refusal means."""
    if isinstance(reply, redis.exceptions.NoScriptError):
        raise NoScript
    if isinstance(reply, redis.ResponseError):
        raise StoreError(f"redis at {where} refused a commit: {reply}")
    if reply[0] == -1:  # a resend: what the script did the first time it saw this token
        reply = [v.encode() if isinstance(v, str) else v for v in json.loads(reply[1])]
    if reply[0] == -2:
        raise Rerun  # a lost commit fenced off before it was applied: nothing was written
    if reply[0] != 0:
        condition = conditions[int(reply[0]) - 1]
        if condition.kind in ("v", "s", "r", "f"):
            raise Rerun  # something the body read changed: run it again from fresh reads
        expected = condition.expected
        raise ConflictError(
            f"{condition.what} already exists"
            if expected is None
            else f"{condition.what} changed or does not exist (expected version {expected!r})"
        )
    flat = reply[1:]
    return {text(sid): int(v) for sid, v in zip(flat[::2], flat[1::2], strict=True)}


class Link:
    """One pooled connection for the length of one body run: its WATCHes live on it."""

    def __init__(self, conn: Any, where: str) -> None:
        self.conn = conn
        self.where = where
        self.watched: set[str] = set()
        self.broken = False
        self.trips = 0

    def call(self, commands: Sequence[Command], *, committing: bool = False) -> list[Any]:
        """Send the commands in one write and read every reply: one round trip.

        An error reply comes back as its exception object in the list (the replies after it
        are still read); a lost connection raises ``Disconnected`` before the commit and
        :class:`Unanswered` during it, when the outcome is unknown (:func:`resend`)."""
        self.trips += 1
        conn = self.conn
        replies: list[Any] = []
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except redis.TimeoutError as exc:
            self.broken = True
            raise (Unanswered if committing else StoreUnavailableError)(
                f"redis at {self.where} did not answer in time ({exc}); raise "
                "?socket_timeout= if the server is slow"
                + (": the commit may or may not have been applied" if committing else ""),
                where=self.where,
                cause=exc,
            ) from exc
        except redis.ConnectionError as exc:
            self.broken = True
            if committing:
                raise Unanswered(
                    f"lost the connection to redis at {self.where} during a commit ({exc}): "
                    "it may or may not have been applied",
                    where=self.where,
                    cause=exc,
                ) from exc
            raise Disconnected(exc) from exc
        except BaseException:
            self.broken = True  # replies left unread: the connection cannot be reused
            raise
        return replies


def resend(link: Link, command: Command, lost: Unanswered) -> Any:
    """The reply to ``command`` (a commit whose answer was lost, or the fence of its token),
    sent again on a new connection up to five times with the script loaded in the same round
    trip (a restarted server lost it). The script answers a token it has seen with what it
    did then (``commit_outcome`` reads that), so whatever happened to the first send, the
    commit is applied at most once. Raises ``lost`` (the outcome stays unknown) if no resend
    is answered."""
    # Loud, not silent: an operator sees each outage the store rode out, and its cause.
    log.warning("%s; resending the commit with its token", lost)
    for tries, delay in enumerate(_RESEND_DELAYS, start=1):
        time.sleep(delay)
        link.conn.disconnect()
        link.broken = False
        link.watched.clear()  # a new connection: the WATCHes went with the old one
        try:
            _, reply = link.call([("SCRIPT", "LOAD", SCRIPT), command], committing=True)
        except Unanswered:
            continue
        log.warning("redis at %s answered the resent commit (resend %d)", link.where, tries)
        return reply
    raise lost


def raise_errors(replies: Sequence[Any], where: str) -> None:
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise StoreError(f"redis at {where} refused a command: {reply}")


def text(value: bytes) -> str:
    return value.decode()
