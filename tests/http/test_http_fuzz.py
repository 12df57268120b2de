"""Fuzz the API as published: the OpenAPI document a real ``fxdurable serve`` answers at
``GET /openapi.json`` drives schemathesis against that same server, authenticated as alice.

Every answer must be below 500, every 4xx a JSON ``{"code", "message"}`` of strings, every
response must match what the document says (status, content type, body schema), invalid input
must be refused, and the server log must show no traceback. A second, schema-blind test posts
arbitrary bytes and JSON to every POST route. Below HTTP clients' manners, raw sockets send
header values that are not ASCII (httpx refuses to) and bodies cut short by a client that hangs
up, on every route. All are derandomized (CI sees the same cases every run) and bounded (well
under a minute on two cores); ``test_regressions`` keeps the inputs that once made the server
answer 500.

schemathesis's own pytest plugin (``schemathesis.pytest.from_fixture``) does not run under
pytest 9.2 (it sets ``request.node._nodeid``, which pytest no longer has), so the cases are
drawn from each operation's public ``as_strategy`` and sent with ``Case.call``; its coverage
phase (hand-picked boundary values) is only reachable through that plugin or its CLI.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import schemathesis
from http_lines import parsed
from http_server import ALICE, ALICE_TOKEN, WAKE_SECRET, ServedApp
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from raw_http import Header, exchange, hang_up_mid_body
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fxdurable.http.signing import SIGNATURE_HEADER, sign_wake

# A session alice owns, with a settled turn in it: cases pinned to it get past the ownership
# check to the code behind it (cursors, steering, abort, history), which a generated session
# id, owned by nobody, never reaches.
SESSION = "fuzz-alice"
PROMPT = "Read the state, charge order 42 and deploy release 2.0."
EXAMPLES = 20  # per operation, generation mode and pinning: 7 x 2 x 2 x 20 = 560 requests
REQUEST_TIMEOUT_S = 15.0  # a POST /chat that streams a whole turn takes well under a second
POST_ROUTES = ("/chat", "/steer", "/abort", "/wake", "/sessions/fuzz-alice/fork")
# Operations whose one parameter is the session id in the path, or that take none (demo
# mode's): schemathesis finds no negative value for them (Hypothesis reports Unsatisfiable),
# so test_regressions sends bad session ids itself.
PATH_ONLY = (
    "GET /sessions/{session_id}",
    "GET /sessions/{session_id}/history",
    "GET /sessions/{session_id}/trace",
    "GET /sessions/{session_id}/calls",
    "GET /agents",
    "GET /demo",
    "POST /demo/crash",
)

# Positive data may still be refused for reasons the document cannot express (no such agent or
# session, busy): positive_data_acceptance is left out, everything else must hold.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


def _serve(served: Callable[..., ServedApp], **kwargs: Any) -> ServedApp:
    # A reconnecting GET /chat of an existing session waits this long for a new line: short,
    # so that each such case costs a fraction of a second, not the default minute.
    app = served(extra_env={"FXD_HTTP_IDLE_TIMEOUT_S": "0.2"}, **kwargs)
    app.start()
    with httpx.stream(
        "POST",
        f"{app.url}/chat",
        headers=ALICE,
        json={"sessionId": SESSION, "prompt": PROMPT},
        timeout=REQUEST_TIMEOUT_S,
    ) as response:
        assert response.status_code == 200, response.read()
        lines = list(parsed(response))
    assert lines[-1]["type"] == "turn_end", lines
    return app


def _check_answer(status: int, content_type: str, body: bytes, what: str) -> None:
    assert status < 500, f"{what} -> {status}: {body[:500]!r}"
    if 400 <= status < 500:
        assert content_type.startswith("application/json"), f"{what} -> {status} {content_type}"
        error = json.loads(body)
        assert isinstance(error, dict), f"{what} -> {status}: {error!r}"
        assert isinstance(error.get("code"), str) and error["code"], f"{what} -> {error!r}"
        assert isinstance(error.get("message"), str) and error["message"], f"{what} -> {error!r}"


def _check_log(app: ServedApp) -> None:
    log = app.output()
    for sign in ("Traceback", "Exception in ASGI application", "unexpected error"):
        assert sign not in log, f"the server log has {sign!r}:\n{log[-4000:]}"


def _describe(case: Case) -> str:
    # Not as_curl_command: it masks anything named like a session or a token.
    return (
        f"{case.method.upper()} {case.formatted_path} query={case.query!r} "
        f"headers={dict(case.headers or {})!r} body={case.body!r}"
    )


def _pinned(case: Case) -> Case:
    """The case with its session id (where it has one) replaced by alice's session."""
    if isinstance(case.body, dict) and "sessionId" in case.body:
        case.body = {**case.body, "sessionId": SESSION}
    return case


def _pins(label: str) -> dict[str, Any]:
    if "{session_id}" in label:
        return {"path_parameters": {"session_id": SESSION}}
    if label == "GET /chat":
        return {"query": {"sessionId": SESSION}}
    return {}


def _operations(app: ServedApp) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{app.url}/openapi.json", timeout=REQUEST_TIMEOUT_S)
    # Credentials are not fuzzed: every case is alice's, so the requests reach past the
    # authentication to the routes (the 401 answers are covered in test_regressions).
    schema.config.generation.update(with_security_parameters=False)
    operations = [result.ok() for result in schema.get_all_operations()]
    # An erase (DELETE /sessions/{id}) pinned to alice's session deletes it: fuzzed last, so
    # every other operation meets the session the fixture made.
    return sorted(operations, key=lambda operation: operation.label.startswith("DELETE "))


def _fuzz(app: ServedApp, operations: list[Any]) -> dict[str, set[int]]:
    """Every operation in both generation modes, unpinned and pinned to alice's session;
    returns the statuses answered per operation."""
    statuses: dict[str, set[int]] = {}
    for operation in operations:
        for mode in GenerationMode:
            if mode is GenerationMode.NEGATIVE and operation.label in PATH_ONLY:
                continue
            for pinned in (False, True):
                pins = _pins(operation.label) if pinned else {}
                strategy = operation.as_strategy(generation_mode=mode, **pins)
                if pinned:
                    strategy = strategy.map(_pinned)

                @SETTINGS
                @given(case=strategy)
                def fuzz(case: Case) -> None:
                    response = case.call(base_url=app.url, headers=ALICE, timeout=REQUEST_TIMEOUT_S)
                    statuses.setdefault(case.operation.label, set()).add(response.status_code)
                    _check_answer(
                        response.status_code,
                        response.headers.get("content-type", [""])[0],
                        response.content,
                        _describe(case),
                    )
                    case.validate_response(response, checks=CHECKS, headers=ALICE)

                fuzz()
                _check_log(app)
    return statuses


def test_the_published_document_holds_under_fuzzing(served):
    app = _serve(served)
    operations = _operations(app)
    assert {op.label for op in operations} >= {
        "POST /chat",
        "GET /chat",
        "POST /steer",
        "POST /abort",
        "GET /sessions",
        "GET /sessions/{session_id}",
        "GET /sessions/{session_id}/history",
        "GET /sessions/{session_id}/trace",
        "POST /sessions/{session_id}/fork",
        "POST /wake",
    }
    statuses = _fuzz(app, operations)
    # The fuzzing reached the routes, not only their validation.
    assert 200 in statuses["POST /chat"] and 200 in statuses["GET /chat"], statuses
    assert 200 in statuses["POST /steer"] and 200 in statuses["POST /abort"], statuses
    assert 200 in statuses["GET /sessions"], statuses
    assert 200 in statuses["GET /sessions/{session_id}/trace"], statuses


def test_receipt_mode_holds_the_document_under_fuzzing(served):
    """Receipt mode (the Lambda adapter's): POST /chat answers 202 with a receipt, GET /chat a
    long poll; both as the document says."""
    env = {"FXD_HTTP_MODE": "receipt", "FXD_HTTP_LONG_POLL_S": "0.2"}
    app = served(extra_env=env)
    app.start()
    first = httpx.post(
        f"{app.url}/chat",
        headers=ALICE,
        json={"sessionId": SESSION, "prompt": PROMPT},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert first.status_code == 202, first.text
    chat = [op for op in _operations(app) if op.label in ("POST /chat", "GET /chat")]
    statuses = _fuzz(app, chat)
    assert 202 in statuses["POST /chat"] and 200 in statuses["GET /chat"], statuses


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
# Objects with the routes' own field names, so the bodies get past "not an object" and "unknown
# field" often enough to reach the code after validation.
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.text(max_size=40) | _JSON,
        "text": st.text(max_size=40) | _JSON,
        "sessionId": st.sampled_from([SESSION, "nobody-s", ""]) | st.text(max_size=20) | _JSON,
        "agent": st.sampled_from(["crash-agent", "nope"]) | _JSON,
        "whenBusy": st.sampled_from(["queue", "reject", "later"]) | _JSON,
        "reason": st.text(max_size=10) | _JSON,
    },
)
_BODIES = (
    st.binary(max_size=200)
    | _JSON.map(lambda value: json.dumps(value).encode())
    | _FIELDS.map(lambda value: json.dumps(value).encode())
)
# Printable ASCII without surrounding blanks: what a client can put in a header at all (httpx
# refuses to send a value with leading or trailing whitespace, so the server never sees one).
_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(
    str.strip
)
# X-Fxd-Signature: none, a valid one for the body sent ("sign"), or a malformed or forged one.
_SIGNATURES = st.one_of(
    st.none(),
    st.just("sign"),
    st.builds(
        lambda t, v: f"t={t},v1={v}".strip(),
        st.integers() | st.integers(10**300, 10**400) | _HEADER_TEXT,
        _HEADER_TEXT,
    ),
    _HEADER_TEXT,
)


def test_arbitrary_bodies_never_answer_5xx(served):
    app = _serve(served)
    with httpx.Client(base_url=app.url, headers=ALICE, timeout=REQUEST_TIMEOUT_S) as client:

        @settings(SETTINGS, max_examples=150)
        @given(route=st.sampled_from(POST_ROUTES), body=_BODIES, signature=_SIGNATURES)
        # Each of these once answered 500 (see test_regressions).
        @example(route="/chat", body=b"[" * 100_000, signature=None)
        @example(route="/wake", body=b"{}", signature=f"t={'9' * 400},v1=00")
        @example(
            route="/steer", body=b'{"sessionId": "fuzz-alice", "text": "\\ud800"}', signature=None
        )
        @example(route="/wake", body=b'{"sessionId": "fuzz-alice"}', signature="sign")
        @example(route="/wake", body=b"{}", signature=" ")  # a blank header: sent empty
        def post(route: str, body: bytes, signature: str | None) -> None:
            headers = {"content-type": "application/json"}
            if signature is not None:
                sent = sign_wake(WAKE_SECRET, body) if signature == "sign" else signature
                headers[SIGNATURE_HEADER] = sent.strip()  # httpx sends no surrounding blanks
            response = client.post(route, content=body, headers=headers)
            _check_answer(
                response.status_code,
                response.headers.get("content-type", ""),
                response.content,
                f"POST {route} {body[:200]!r} {SIGNATURE_HEADER}: {signature!r}",
            )

        post()
    _check_log(app)


# -- below the clients' manners: raw bytes on a socket ------------------------------------------

# Every route, with a body that gets it past validation cheaply (an unknown agent: no turn
# runs; a session nobody has: nothing changes), so that the headers are what is tried.
RAW_ROUTES: list[tuple[str, str, bytes]] = [
    ("POST", "/chat", json.dumps({"sessionId": SESSION, "prompt": "x", "agent": "nope"}).encode()),
    ("GET", f"/chat?sessionId={SESSION}", b""),
    ("POST", "/steer", json.dumps({"sessionId": "nobody-s", "text": "x"}).encode()),
    ("POST", "/abort", json.dumps({"sessionId": "nobody-s"}).encode()),
    ("GET", f"/sessions/{SESSION}", b""),
    ("GET", f"/sessions/{SESSION}/history", b""),
    ("POST", "/wake", json.dumps({"sessionId": "nobody-s"}).encode()),
    ("GET", "/openapi.json", b""),
    ("GET", "/healthz", b""),
]
# Headers the routes read, and one they do not. Not Content-Length or Transfer-Encoding: a bad
# one never reaches the app (uvicorn answers 400 itself, as the HTTP parser must).
RAW_HEADERS = (b"authorization", SIGNATURE_HEADER.lower().encode(), b"idempotency-key")
FUZZED_HEADERS = (*RAW_HEADERS, b"content-type", b"x-anything")
# What h11 (uvicorn's parser) accepts in a header value: no NUL, no line breaks, blanks only
# between other bytes. Everything else (controls, DEL, bytes 0x80-0xFF, UTF-8) goes.
_BLANKS = frozenset(b" \t\n\r\x0b\x0c\x00")
_TOKEN = st.binary(min_size=1, max_size=12).map(
    lambda raw: bytes(b for b in raw if b not in _BLANKS) or b"\xe9"
)
_NON_ASCII = (
    st.lists(_TOKEN, min_size=1, max_size=3)
    .map(b" ".join)
    .map(lambda value: value if not value.isascii() else value + "é".encode())
)
# A prefix that gets the value past the first check of the header that carries it.
_PREFIXES = (b"", b"Bearer ", b"t={now},v1=", b"t=", f"Bearer {ALICE_TOKEN}".encode())


def _raw_headers(body: bytes, name: bytes, value: bytes) -> list[Header]:
    """Alice's credentials, a signature valid for ``body``, JSON; ``name`` set to ``value``."""
    headers = {
        b"authorization": f"Bearer {ALICE_TOKEN}".encode(),
        SIGNATURE_HEADER.lower().encode(): sign_wake(WAKE_SECRET, body).encode(),
        b"content-type": b"application/json",
    }
    headers[name] = value.replace(b"{now}", str(int(time.time())).encode())
    return list(headers.items())


def test_non_ascii_header_values_never_answer_5xx(served):
    app = _serve(served)

    @settings(SETTINGS, max_examples=150)
    @given(
        route=st.sampled_from(RAW_ROUTES),
        name=st.sampled_from(FUZZED_HEADERS),
        prefix=st.sampled_from(_PREFIXES),
        value=_NON_ASCII,
    )
    # Each of these once answered 500 (see test_regressions).
    @example(route=RAW_ROUTES[6], name=RAW_HEADERS[1], prefix=b"t={now},v1=", value=b"\xc3\xa9")
    @example(route=RAW_ROUTES[6], name=RAW_HEADERS[1], prefix=b"t={now},v1=", value=b"\xff")
    def send(route: tuple[str, str, bytes], name: bytes, prefix: bytes, value: bytes) -> None:
        method, target, body = route
        answer = exchange(
            app.port,
            method,
            target,
            _raw_headers(body, name, prefix + value),
            body,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        _check_answer(
            answer.status,
            answer.headers.get("content-type", ""),
            answer.body,
            f"{method} {target} {name.decode()}: {prefix + value!r}",
        )

    send()
    _check_log(app)


# What the server logs when a client hangs up before its body is read: no traceback, no error.
HUNG_UP = re.compile(r"INFO fxdurable\.http: the client hung up before its body was read")


def test_a_client_that_hangs_up_mid_body_is_no_error(served):
    app = _serve(served, verbose=True)  # -v: the log shows the server noticing each hang-up
    reading = 0  # requests whose route reads the body before answering
    for method, target, body in RAW_ROUTES:
        for credentials in (True, False):
            headers = _raw_headers(body or b"{}", b"content-type", b"application/json")
            if not credentials:
                headers = [h for h in headers if h[0] not in RAW_HEADERS]
            hang_up_mid_body(app.port, method, target, headers, body or b"{}")
            # POST /wake reads the body before it checks the signature; the rest after the
            # credentials, and GETs never.
            reading += method == "POST" and (credentials or target == "/wake")
    assert reading == 5
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while len(HUNG_UP.findall(app.output())) < reading:
        _check_log(app)
        assert time.monotonic() < deadline, f"{reading} hang-ups not all seen:\n{app.output()}"
        time.sleep(0.05)
    _check_log(app)
    assert httpx.get(f"{app.url}/healthz", timeout=REQUEST_TIMEOUT_S).status_code == 200


def test_regressions(served):
    """Inputs that once answered 500 (or, the Arabic-Indic cursor, 200 against the document's
    ``^[0-9]+$``), each now a 4xx with a stable code."""
    app = _serve(served)
    with httpx.Client(base_url=app.url, timeout=REQUEST_TIMEOUT_S) as client:
        cases: list[tuple[str, httpx.Response, int, str]] = [
            # str.isdigit() accepts '²', which int() refuses: the cursor must be ASCII digits.
            (
                "cursor '²'",
                client.get("/chat", params={"sessionId": SESSION, "cursor": "²"}, headers=ALICE),
                400,
                "bad_cursor",
            ),
            (
                "cursor '١' (an Arabic-Indic one)",
                client.get("/chat", params={"sessionId": SESSION, "cursor": "١"}, headers=ALICE),
                400,
                "bad_cursor",
            ),
            # json.loads raised RecursionError (not a ValueError) on deep nesting.
            (
                "100,000 nested arrays",
                client.post("/chat", content=b"[" * 100_000, headers=ALICE),
                400,
                "malformed_json",
            ),
            # int() of a 400-digit timestamp does not fit a float: OverflowError, unsigned.
            (
                "a 400-digit signature timestamp",
                client.post(
                    "/wake",
                    content=b'{"sessionId": "fuzz-alice"}',
                    headers={SIGNATURE_HEADER: f"t={'9' * 400},v1=00"},
                ),
                401,
                "bad_signature",
            ),
            # The path-only operations, which the fuzzer sends no negative values for.
            (
                "session id '-x'",
                client.get("/sessions/-x", headers=ALICE),
                422,
                "invalid_request",
            ),
            (
                "a 129-character session id",
                client.get(f"/sessions/{'s' * 129}/history", headers=ALICE),
                422,
                "invalid_request",
            ),
            (
                "no credentials",
                client.post("/chat", json={"prompt": "hi"}),
                401,
                "unauthorized",
            ),
        ]
    for what, response, status, code in cases:
        assert (response.status_code, response.json()["code"]) == (status, code), (
            what,
            response.text,
        )
    # hmac.compare_digest refuses str with non-ASCII characters (TypeError): 500, unsigned.
    body = json.dumps({"sessionId": SESSION}).encode()
    for value in ("é".encode(), b"\xff"):
        signature = f"t={int(time.time())},v1=".encode() + value
        answer = exchange(
            app.port,
            "POST",
            "/wake",
            [(SIGNATURE_HEADER.encode(), signature)],
            body,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        assert (answer.status, json.loads(answer.body)["code"]) == (401, "bad_signature"), (
            signature,
            answer,
        )
    _check_log(app)
