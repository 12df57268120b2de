"""A commit whose answer is lost, on DynamoDB: it lands once and the call succeeds.

A fault-injecting HTTP proxy stands between the store and the moto server. Armed, it lets the
next ``TransactWriteItems`` through to moto (which applies it) and then drops the client's
connection without an answer (``drop``), or holds the answer until the client gives up
(``stall``). botocore sends the commit again with the same ``ClientRequestToken``; DynamoDB
would answer the resend with the first one's success, moto (which ignores the token) cancels
it because the first one moved the head. The store reads the heads back, finds the commit's
token there and takes the commit as done: one event, one attempt, the session consistent —
where a rerun from fresh reads would have applied the transition a second time.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from aws_support import REGION, aws_session

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.stores._ddb_api import READ_TIMEOUT_S
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing.invariants import check_store

pytestmark = pytest.mark.aws

COMMIT = "DynamoDB_20120810.TransactWriteItems"


class _Proxy(http.server.ThreadingHTTPServer):
    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        where = urlsplit(upstream)
        self.upstream = (where.hostname or "127.0.0.1", where.port or 80)
        self.mode: str | None = None  # "drop" | "stall": what to do to the next commit
        self.faulted = 0  # commits applied upstream whose answer the client never got
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def take_fault(self, target: str) -> str | None:
        with self.lock:
            if target != COMMIT or self.mode is None:
                return None
            mode, self.mode = self.mode, None
            return mode


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream.request("POST", self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            payload = answer.read()
        finally:
            upstream.close()
        fault = self.server.take_fault(self.headers.get("X-Amz-Target", ""))
        if fault is not None:
            self.server.faulted += 1
            if fault == "stall":  # until the client gives up (its read timeout) and leaves
                self.connection.settimeout(READ_TIMEOUT_S * 3)
                try:
                    while self.connection.recv(65536):
                        pass
                except OSError:
                    pass
            self.close_connection = True
            return  # applied upstream, no answer here
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(moto_server: str) -> Iterator[_Proxy]:
    server = _Proxy(moto_server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "mode",
    ["drop", pytest.param("stall", marks=pytest.mark.slow)],  # stall: a 10 s timeout
)
def test_a_commit_whose_answer_is_lost_lands_once(proxy: _Proxy, mode: str) -> None:
    url = f"dynamodb://fxd-lost-{time.monotonic_ns() % 10**9}?region={REGION}"
    store = DynamoStore(f"{url}&endpoint_url={proxy.url}", session=aws_session())
    try:
        journal = Journal(store, SystemClock(), RandomIds())
        sub = journal.admit("s1", agent="a", prompt="go").submission
        fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=60)
        assert fence is not None
        before = store.read(lambda v: v.get_session("s1"))
        assert before is not None
        proxy.mode = mode
        start = journal.begin_attempt(fence, sub.id, worker="w")  # its answer is lost
        assert proxy.faulted == 1, "the proxy never faulted the commit: the test proves nothing"
        after = store.read(lambda v: v.get_session("s1"))
        assert after is not None
        attempts = store.read(lambda v: list(v.attempts(sub.id)))
        assert [a.number for a in attempts] == [start.attempt.number] == [1]
        # The transition's events once each: the session moved by one commit, not two.
        events = store.read(lambda v: list(v.events("s1")))
        assert [e.seq for e in events] == list(range(1, after.next_event_seq))
        assert after.version == before.version + 1, (before.version, after.version)
        # And the session goes on from there.
        journal.settle(fence, sub.id, "completed", text="done")
        journal.release(fence)
        summary = store.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        assert summary.violations == ()
    finally:
        store.close()
