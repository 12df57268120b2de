"""The Redis store: ``redis://host:port/db`` (``rediss://`` for TLS), single node.

Transactions are optimistic, and each session has a version (``p:sv:<sid>``) that every
commit writing one of its keys bumps. The store keeps what it read of a session at its
version (:mod:`._redis_cache`), and a body runs against that (:mod:`._redis_cached_tx`):
what the cache holds costs nothing to read, a miss is one ``EVALSHA`` of ``lua/read.lua``
that returns the reply with the version of its session. The commit is one ``EVALSHA`` of
``lua/commit.lua`` whose conditions are the versions the body read (and the raw value of
anything it read that no session owns, a request id): if one moved, nothing is written and
the body runs again from fresh reads (bodies are pure over their reads; at most 50 runs,
then :class:`~fxdurable.errors.StoreError`). A body that raises is run again too if what it
read had changed (its error may come from a stale view); otherwise its error stands and
nothing is written. A write to a record the body did not read (an append, an insert)
becomes a condition the same script checks before it writes anything, so a failed
condition raises :class:`~fxdurable.errors.ConflictError` and nothing is written. Fencing
needs nothing more: the journal compares the token of the session record it read, and the
commit holds only if that record (its session's version) is unchanged.

A body that reads what no session owns as a whole (``list_sessions``, ``active_sessions``,
the attempts or tool tasks of a record that does not exist) runs on the WATCH/MULTI path
instead (:mod:`._redis_tx`): each key WATCHed as it is read, the commit ``MULTI``, the same
``EVALSHA``, ``EXEC``, run again if anything WATCHed changed.

Key layout, under a prefix ``p`` (``?prefix=``, default ``fxd``; letters, digits, ``._-``).
Every key is ``p:<kind>:<id>`` with the id last, so no id (ids may contain ``:``) can make one
key collide with another::

    p:schema                  string  the data marker: the oldest layout version of fxdurable
                                      that may open the store (written on first open)
    p:layout                  string  the layout version, when it is not p:schema's
    p:migrating               string  the migrator running a layout step (a TTL it renews)
    p:sv:<sid>                string  the session's version: bumped by each commit that
                                      writes one of its keys (absent: 0)
    p:sessions                zset    every session id (score 0): list_sessions
    p:sessions:active         zset    ids of sessions whose status is active: active_sessions
    p:sessions:retention      zset    ids of idle sessions with a retention, by retain_until
                                      (the score): the retention sweep (core/retention.py)
    p:session:<sid>           string  SessionRecord JSON (its lease lives here: see below)
    p:subs:<sid>              zset    submission ids by seq (the score): admission order
    p:unsettled:<sid>         zset    ids of queued/running submissions by seq
    p:sub:<id>                string  SubmissionRecord JSON
    p:req:<request_id>        string  the submission id: one submission per request id
    p:attempts:<sub>          hash    attempt number -> AttemptRecord JSON
    p:turn:<id>               string  TurnRecord JSON
    p:mcalls:<turn>           hash    round -> ModelCallRecord JSON (insert-only)
    p:task:<id>               string  ToolTaskRecord JSON
    p:turntasks:<turn>        zset    task ids by round * 1e6 + index: (round, index) order
    p:stasks:<sid>            list    task ids in creation order
    p:msgs:<sid>              zset    MessageRecord JSON by seq (append-only)
    p:events:<sid>            zset    EventRecord JSON by seq (append-only); a cursor
                                      reads ZRANGEBYSCORE k (after +inf LIMIT 0 n
    p:blob:<sha256 hex>       string  a blob's bytes (``put_blob``: ``SET NX``, one round
                                      trip; ``get_blob``: ``GET``, one; no session owns it;
                                      ``blob_digests``: ``SCAN MATCH p:blob:* COUNT 1000``,
                                      one trip a page, never ``KEYS``)
    p:tok:<token>             string  a commit's reply, JSON, for 10 minutes (a TTL): what
                                      a resend of that commit answers (below)

Blob keys came after layout version 1 without changing it: they are new keys beside the old
ones, which an older fxdurable never reads. Layout changes are numbered steps, which a
writer's open applies when they are compatible and :func:`migrate` when not
(:mod:`._redis_layout`: the marker's encoding; :mod:`._layout`: the mechanism).

Records are JSON from :mod:`fxdurable.core.recordcodec`. No record has a TTL (only the commit
tokens do): a lease is a field of the session record with an expiry timestamp the journal
compares, never a key that expires; and a server that may evict keys
(``maxmemory-policy allkeys-*``) is refused. The
layout is for one Redis node (no hash tags; Redis Cluster is not supported).

Round trips (measured by tests/stores/test_redis_store.py and
tests/stores/test_redis_session_cache.py; ``bench.redis_steps`` reports them): with the
session held (the previous transition of this store leaves it so, a blind write from the
records the journal holds included: the script's reply names each session's new version,
so the store knows the one before), every transition is 1, its commit script, and a read is
1, the script that checks the version (a miss brings the reply in the same trip), or 0 when
it is the lease holder's first read after its own commit: a read of one session, all of it
from what that commit left, while this store holds the session's live lease (it took it,
and the wall clock says it has not expired). That read is the commit's state; a write the
commit did not see (a steer, an abort from another process) moved the session's version,
so it is in the next read, which checks, and the holder's next commit reruns on it. A
commit whose answer was lost, refused or on the WATCH path leaves nothing to read from. A
tool step plus its model call through the runtime costs 2: the result's commit, and the
model response's with the next call's intent (the model request's read is the first after
the result's commit); it was 4 with each read checking the version, and 33 on the WATCH
path with a snapshot read before each step. What the store
does not hold costs one more trip per query of the body that misses: in a journal-only
turn ``admit`` costs 3, ``begin_attempt`` 4, ``settle`` 2 when nothing read the turn's
tool tasks before. On the WATCH path a body that reads once
costs that one round trip; one that reads more WATCHes what it read and ends with an empty
``MULTI``/``EXEC`` that validates it, so ``fxdurable check`` on a store under heavy writes
may need a quieter moment.

Durability is Redis persistence: run it with ``appendonly yes`` (and the default
``maxmemory-policy noeviction``). Opening a store to write checks this (``INFO persistence``
and, where allowed, ``CONFIG GET appendfsync``) and refuses, with
:class:`~fxdurable.errors.ConfigurationError` saying how to enable the AOF, a server without
an append-only file, with ``appendfsync no``, or whose ``INFO`` is refused: a restart of such a
server silently loses committed steps. RDB snapshots alone are refused too, because they lose
every write since the last snapshot (minutes). ``?durability=none`` in the URL skips the
check, for tests and caches whose loss is acceptable; read-only opens (``create=False``)
write nothing and do not check.

With ``appendfsync everysec``, Redis's default, the AOF is
written before a commit is acknowledged but fsynced once a second, so a power cut may lose
about the last second of commits; ``appendfsync always`` matches SQLite's
``synchronous=FULL``. A connection lost while reading runs the transaction again on a new
connection (a restarting server gets about three seconds). A commit whose answer is lost
(the connection dropped once the request left, or no answer within ``socket_timeout``) is an
unknown outcome: each commit carries a random token, and the script records its reply under
``p:tok:<token>`` in the same atomic step as its writes (no extra round trip), so the store
sends the same commit again on a new connection (up to five times over about four seconds)
and the script answers a token it has seen with what it did then — applied at most once,
whichever send arrives first. The store's cache of the sessions it touched is dropped (the
next read fetches). On the WATCH path, whose script does not carry the body's reads, the
resend is a fence: it records "not applied" for a token not yet seen (so a first send still
in flight can no longer apply) and the body runs again. When no resend is answered the
commit raises :class:`~fxdurable.errors.StoreUnavailableError`: it may or may not have been
applied. A server that cannot be reached, or does not answer within ``socket_timeout``, raises
that same error (a :class:`~fxdurable.errors.StoreError`), never a redis-py exception.

URL options: ``prefix``, ``durability`` (``aof``, the default, or ``none``),
``socket_timeout`` and ``socket_connect_timeout`` (seconds, default 10 and 5), and with
``rediss://`` ``ssl_cert_reqs`` (none|optional|required) and ``ssl_ca_certs``. A password in
the URL never appears in messages or in ``store.url``.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from fxdurable.core.blobs import DIGEST_PAGE, blob_digest, is_digest, verified
from fxdurable.core.optimistic import Rerun, contention_backoff, optimistic
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import ConfigurationError, StoreError, StoreUnavailableError

try:
    import redis
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ConfigurationError(
        "the Redis store needs the redis package: pip install 'fxdurable[redis]'"
    ) from exc

from fxdurable.stores._body import refuse_awaitable
from fxdurable.stores._notify_redis import RedisNotifier
from fxdurable.stores._redis_cache import READ_SCRIPT, READ_SHA, Caches, Unsupported
from fxdurable.stores._redis_cached_tx import CachedTx
from fxdurable.stores._redis_layout import (
    MIGRATIONS,
    RedisStep,
    apply_compatible,
    check_opened,
    migrate,
    new_marker,
)
from fxdurable.stores._redis_setup import (
    check_eviction,
    check_persistence,
    parse_url,
    redact,
)
from fxdurable.stores._redis_tx import RedisTx
from fxdurable.stores._redis_wire import (
    SCRIPT,
    SCRIPT_SHA,
    Command,
    Disconnected,
    Keys,
    Link,
    NoScript,
    raise_errors,
    text,
)

__all__ = ["RedisStore", "migrate"]

T = TypeVar("T")

_MAX_RUNS = 50  # runs of one body before giving up on concurrent writers
_BACKOFF = contention_backoff(random.random)
_RECONNECT_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # ~3 s for a restarting server


class RedisStore:
    """``redis://[user:password@]host:port/db[?prefix=fxd]``; ``rediss://`` for TLS.

    Refuses (ConfigurationError) to write to a server without an append-only file unless the
    URL says ``?durability=none``.

    ``create=False`` (read-only tools) refuses a database and prefix that hold no fxdurable
    data (no ``<prefix>:schema`` key) and writes nothing, layout steps included.

    ``migrations``: the layout steps this code knows (tests inject their own).
    """

    def __init__(
        self, url: str, *, create: bool = True, migrations: Sequence[RedisStep] = MIGRATIONS
    ) -> None:
        self._target, kwargs = parse_url(url)
        self.url = redact(url)
        self._keys = Keys(self._target.prefix)
        self._caches = Caches(self._keys)
        self._pool = redis.ConnectionPool(**kwargs)
        self._cv = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._round_trips = 0
        self._notifier: RedisNotifier | None = None  # made on first use (notifier())
        try:
            self._open(create, migrations)
        except BaseException:
            self._pool.disconnect()
            raise

    @property
    def where(self) -> str:
        return self._target.where

    # -- connections --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _link(self) -> Iterator[Link]:
        with self._cv:
            if self._closed:
                raise StoreError(f"the Redis store at {self.where} is closed")
            self._in_flight += 1
        link: Link | None = None
        try:
            try:
                conn = self._pool.get_connection()
            except (redis.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
                raise StoreError(f"redis at {self.where} refused the credentials: {exc}") from exc
            except redis.ConnectionError as exc:  # refused or reset: run again, or give up
                raise Disconnected(exc) from exc
            except redis.TimeoutError as exc:  # a silent host: waiting again would not help
                raise StoreUnavailableError(
                    f"redis at {self.where} did not accept a connection in time ({exc})",
                    where=self.where,
                    cause=exc,
                ) from exc
            except redis.RedisError as exc:
                raise StoreError(
                    f"cannot open a connection to redis at {self.where}: {exc}"
                ) from exc
            link = Link(conn, self.where)
            yield link
        finally:
            try:
                if link is not None:
                    self._release(link)
            finally:  # a KeyboardInterrupt in the release must not leave close() waiting 30 s
                with self._cv:
                    self._in_flight -= 1
                    self._cv.notify_all()

    def _release(self, link: Link) -> None:
        try:
            if link.watched and not link.broken:
                # A failed UNWATCH marks the link broken: it is disconnected below.
                with contextlib.suppress(Disconnected, StoreError):
                    link.call([("UNWATCH",)])
        finally:  # a KeyboardInterrupt mid-UNWATCH still returns the connection, then stands
            if link.broken:
                link.conn.disconnect()
            with self._cv:
                self._round_trips += link.trips
            self._pool.release(link.conn)

    def _run(self, body: Callable[[Link], T], what: str) -> T:
        """Run ``body`` on a fresh link until it neither reruns nor loses its connection
        (the runs, their backoff and the error when they run out: :func:`optimistic`)."""
        delays = iter(_RECONNECT_DELAYS)
        loaded = False

        def run(_: int) -> T:
            nonlocal loaded
            try:
                with self._link() as link:
                    return body(link)
            except NoScript:
                if loaded:
                    raise StoreError(
                        f"redis at {self.where} keeps losing the commit script"
                    ) from None
                self._load_script()
                loaded = True
                raise Rerun(delay=0) from None
            except Disconnected as exc:
                delay = next(delays, None)
                if delay is None:
                    raise StoreUnavailableError(
                        f"cannot reach redis at {self.where}: {exc.cause}",
                        where=self.where,
                        cause=exc.cause,
                    ) from None
                raise Rerun(delay=delay) from None

        return optimistic(
            run, attempts=_MAX_RUNS, backoff=_BACKOFF, what=f"{what} on redis at {self.where}"
        )

    def _simple(self, commands: Sequence[Command]) -> list[Any]:
        def body(link: Link) -> list[Any]:
            replies = link.call(commands)
            raise_errors(replies, link.where)
            return replies

        return self._run(body, "a command")

    def _load_script(self) -> None:
        shas = self._simple([("SCRIPT", "LOAD", SCRIPT), ("SCRIPT", "LOAD", READ_SCRIPT)])
        if [text(sha) for sha in shas] != [SCRIPT_SHA, READ_SHA]:
            raise StoreError(f"redis at {self.where} hashed the store's scripts unexpectedly")

    def _open(self, create: bool, steps: Sequence[RedisStep]) -> None:
        keys = self._keys
        # A reader (create=False) writes nothing, so the server's persistence is not its
        # concern; a writer checks it unless the URL says durability=none.
        checks: list[Command] = [("INFO", "memory")]
        if create and self._target.durability == "aof":
            checks += [("INFO", "persistence"), ("CONFIG", "GET", "appendfsync")]
        commands: list[Command] = [("MGET", keys.schema, f"{keys.p}:layout"), *checks]
        if create:
            commands = [
                new_marker(keys, steps),
                *commands,
                ("SCRIPT", "LOAD", SCRIPT),
                ("SCRIPT", "LOAD", READ_SCRIPT),
            ]
        first = commands.index(checks[0])

        def body(link: Link) -> tuple[Any, list[Any]]:
            replies = link.call(commands)
            answers = replies[first : first + len(checks)]
            # INFO and CONFIG may be refused (an ACL, a renamed command): judged below
            raise_errors(replies[:first] + replies[first + len(checks) :], link.where)
            return replies[first - 1], answers

        (schema, layout), answers = self._run(body, "opening the store")
        pending = check_opened(
            schema, layout, steps, create=create, keys=keys, where=self.where, url=self.url
        )
        check_eviction(answers[0], self.where)
        if len(answers) > 1:
            check_persistence(answers[1], answers[2], self.where)
        if pending:  # a writer's open, and only compatible steps: apply them before any use
            apply_compatible(self._pool, keys, self.where, steps, url=self.url)

    # -- the Store protocol -------------------------------------------------------------------

    def _once(self, link: Link, body: Callable[[RedisTx], T], *, writable: bool) -> T:
        """One run of ``body``: on the read cache with one script to commit, or on the
        WATCH/MULTI path when the body reads what the script cannot re-check."""
        try:
            tx: RedisTx = CachedTx(link, self._keys, self._caches, writable=writable)
            return self._attempt(tx, body, writable=writable)
        except Unsupported:
            tx = RedisTx(link, self._keys, writable=writable)
            try:
                return self._attempt(tx, body, writable=writable)
            finally:
                if tx.wrote:  # landed or not, it moved no cache: none may be served unchecked
                    with self._caches.lock:
                        self._caches.epoch += 1

    @staticmethod
    def _attempt(tx: RedisTx, body: Callable[[RedisTx], T], *, writable: bool) -> T:
        try:
            result = body(tx)
            if writable:
                refuse_awaitable(result)
        except Exception as exc:
            if not tx.still_current():
                raise Rerun from exc  # the body saw a torn view: its error may be spurious
            raise
        tx.finish()
        return result

    def transact(self, body: Callable[[Tx], T]) -> T:
        return self._run(lambda link: self._once(link, body, writable=True), "a transaction")

    def read(self, body: Callable[[ReadView], T]) -> T:
        return self._run(lambda link: self._once(link, body, writable=False), "a read")

    def put_blob(self, data: bytes) -> str:
        digest = blob_digest(data)
        # SET NX: a blob never changes, so a second put (or a resend after a lost
        # connection) leaves the first one's bytes, which are these.
        self._simple([("SET", self._keys.blob(digest), bytes(data), "NX")])
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        (data,) = self._simple([("GET", self._keys.blob(digest))])
        return None if data is None else verified(digest, data, f"redis {self.where}")

    def delete_blob(self, digest: str) -> None:
        if is_digest(digest):
            self._simple([("DEL", self._keys.blob(digest))])

    def blob_digests(self) -> Iterator[str]:
        # SCAN, never KEYS: a page per round trip, the server never blocked for the keyspace.
        # Every key there for the whole scan comes out, some maybe twice (the protocol says so).
        cursor = b"0"
        skip = len(self._keys.blob(""))
        while True:
            ((cursor, keys),) = self._simple(
                [("SCAN", cursor, "MATCH", self._keys.blob_pattern, "COUNT", DIGEST_PAGE)]
            )
            for key in keys:
                digest = text(key)[skip:]
                if is_digest(digest):
                    yield digest
            if cursor in (b"0", 0, "0"):
                return

    def notifier(self) -> RedisNotifier:
        """Aborts and steers reach the lease holder by pub/sub (core/notify.py)."""
        with self._cv:
            if self._notifier is None:
                self._notifier = RedisNotifier(
                    self._pool, self._keys.p, self._caches.written_elsewhere
                )
            return self._notifier

    def close(self) -> None:
        """Close every connection, after the transactions in flight (waits up to 30 s)."""
        with self._cv:
            self._closed = True
            self._cv.wait_for(lambda: self._in_flight == 0, timeout=30.0)
        if self._notifier is not None:
            self._notifier.stop()
        self._pool.disconnect()
