"""The HTTP layer's pure parts: wake signatures, token parsing, settings, session keys, the
line format and the OpenAPI document. The routes themselves are tested against a real server
(beside this)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from starlette.requests import Request

from fxdurable.core.records import EventRecord
from fxdurable.errors import ConfigurationError
from fxdurable.http import BearerTokens, HttpSettings, SignatureError, sign_wake, verify_wake
from fxdurable.http.auth import parse_tokens, tokens_from_env
from fxdurable.http.env import app_from_env
from fxdurable.http.lines import line_for
from fxdurable.http.openapi import openapi_document
from fxdurable.http.scoping import (
    SESSION_ID_PATTERN,
    SESSION_KEY_PATTERN,
    public_session_id,
    session_key,
)
from fxdurable.http.stream import tail

SECRET = "s3cret-s3cret-s3cret"
BODY = b'{"sessionId":"s"}'


# -- signatures ------------------------------------------------------------------------------


def test_a_signature_verifies_within_the_window():
    header = sign_wake(SECRET, BODY, timestamp=1_000_000)
    verify_wake(SECRET, BODY, header, window_s=300, now=1_000_299)
    verify_wake(SECRET, BODY, header, window_s=300, now=999_701)


@pytest.mark.parametrize(
    ("secret", "body", "now", "why"),
    [
        ("another-secret-entirely", BODY, 1_000_000, "does not match"),
        (SECRET, b'{"sessionId":"t"}', 1_000_000, "does not match"),
        (SECRET, BODY, 1_000_301, "window"),
        (SECRET, BODY, 999_699, "window"),
    ],
)
def test_forged_tampered_and_stale_signatures_are_refused(secret, body, now, why):
    header = sign_wake(SECRET, BODY, timestamp=1_000_000)
    with pytest.raises(SignatureError, match=why):
        verify_wake(secret, body, header, window_s=300, now=now)


@pytest.mark.parametrize(
    "header",
    [None, "", "v1=abc", "t=abc,v1=00", "t=1000000", "garbage", "t=1000000,v1=é", "t=١,v1=00"],
)
def test_malformed_signature_headers_are_refused(header):
    with pytest.raises(SignatureError):
        verify_wake(SECRET, BODY, header, window_s=300, now=1_000_000)


# -- tokens ----------------------------------------------------------------------------------


def _request(authorization: str | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


def test_bearer_tokens_map_to_their_principal():
    auth = BearerTokens({"a" * 20: "alice", "b" * 20: "bob"})
    who = asyncio.run
    assert who(auth(_request(f"Bearer {'a' * 20}"))) == "alice"
    assert who(auth(_request(f"bearer {'b' * 20}"))) == "bob"
    for header in (None, "", "Bearer", f"Basic {'a' * 20}", f"Bearer {'a' * 19}", "Bearer x"):
        assert who(auth(_request(header))) is None, header


def test_short_tokens_are_refused_at_start():
    with pytest.raises(ConfigurationError, match="16 characters"):
        BearerTokens({"short": "alice"})


def test_token_configuration_is_parsed_and_checked(tmp_path, monkeypatch):
    assert parse_tokens("alice=t1, bob=t2\n# comment\n", source="x") == {"t1": "alice", "t2": "bob"}
    with pytest.raises(ConfigurationError, match="principal=token"):
        parse_tokens("alice", source="x")
    with pytest.raises(ConfigurationError, match="two principals"):
        parse_tokens("alice=t,bob=t", source="x")
    path = tmp_path / "tokens"
    path.write_text("carol=" + "c" * 20 + "\n")
    monkeypatch.setenv("FXD_HTTP_TOKENS", "ignored=" + "i" * 20)
    assert tokens_from_env(str(path)) == {"c" * 20: "carol"}
    with pytest.raises(ConfigurationError, match="cannot read"):
        tokens_from_env(str(tmp_path / "missing"))


def test_the_app_refuses_to_start_without_tokens_unless_dev(monkeypatch, tmp_path):
    monkeypatch.delenv("FXD_HTTP_TOKENS", raising=False)
    monkeypatch.delenv("FXD_HTTP_TOKENS_FILE", raising=False)
    monkeypatch.delenv("FXD_HTTP_DEV", raising=False)
    monkeypatch.setenv("FXD_DEMO_DIR", str(tmp_path / "demo"))
    with pytest.raises(ConfigurationError, match=r"FXD_HTTP_TOKENS.*--dev"):
        app_from_env(agents="fxdurable.cli.demo_agent:agents", store="sqlite:///:memory:")
    assert app_from_env(
        dev=True, agents="fxdurable.cli.demo_agent:agents", store=f"sqlite:///{tmp_path}/a.db"
    )


def test_settings_refuse_nonsense():
    with pytest.raises(ConfigurationError):
        HttpSettings(max_body_bytes=0)
    with pytest.raises(ConfigurationError):
        HttpSettings(poll_min_s=1, poll_max_s=0.5)
    with pytest.raises(ConfigurationError, match="16 characters"):
        HttpSettings(wake_secret="short")
    with pytest.raises(ConfigurationError, match="body_timeout_s"):
        HttpSettings(body_timeout_s=0)


# -- session keys ----------------------------------------------------------------------------


@pytest.mark.parametrize("principal", ["alice", "dev", "auth0|42", "org/alice", "ali ce", "é"])
@pytest.mark.parametrize("public", ["ops-1", "s", "a:b.c_d", "x" * 128])
def test_a_session_key_names_its_principal_and_gives_back_the_public_id(principal, public):
    key = session_key(principal, public)
    assert public_session_id(key) == public
    assert re.fullmatch(SESSION_KEY_PATTERN, key)
    assert key != session_key(principal + "x", public)  # another principal, another session
    # Public ids never contain "/": no caller can name another caller's key.
    assert not re.fullmatch(SESSION_ID_PATTERN, key)


def test_an_in_process_id_is_a_key_of_its_own():
    assert public_session_id("ops-1") == "ops-1"
    assert re.fullmatch(SESSION_KEY_PATTERN, "ops-1")
    for bad in ("", "alice/", "/", "-s", "alice/-s", "alice/s s", "a\nb/s"):
        assert not re.fullmatch(SESSION_KEY_PATTERN, bad), bad


# -- lines -----------------------------------------------------------------------------------


def _event(seq: int, type_: str, **data: object) -> EventRecord:
    return EventRecord(session_id="s", seq=seq, type=type_, turn_id=None, data=data, at=1.0)


def test_admissions_and_settlements_read_as_turn_start_and_turn_end():
    start = line_for(_event(3, "submission.admitted", submission="sub-1", request_id="r"))
    assert (start["type"], start["cursor"], start["turnId"]) == ("turn_start", 3, "sub-1")
    end = line_for(_event(9, "submission.aborted", submission="sub-1"))
    assert (end["type"], end["data"]["outcome"]) == ("turn_end", "aborted")
    other = line_for(_event(4, "tool.completed", task="t"))
    assert other["type"] == "tool.completed" and other["data"] == {"task": "t"}


def test_a_tail_stops_at_its_turn_end_and_a_quiet_one_ends_idle():
    events = [_event(n, "x") for n in range(1, 4)] + [
        _event(4, "submission.completed", submission="a")
    ]

    async def read(after: int) -> list[EventRecord]:
        return [e for e in events if e.seq > after][:2]

    settings = HttpSettings(poll_min_s=0.001, poll_max_s=0.002, keepalive_s=0.01)

    async def collect(**kwargs: object) -> list[dict[str, object]]:
        return [json.loads(b) async for b in tail(read, "s", 1, settings, **kwargs)]  # type: ignore[arg-type]

    lines = asyncio.run(collect(until=lambda e: e.type == "submission.completed"))
    assert [line["cursor"] for line in lines] == [2, 3, 4]
    idle = asyncio.run(collect(idle_timeout_s=0.05))
    assert [line["type"] for line in idle][:3] == ["x", "x", "turn_end"]
    assert idle[-1] == {
        "cursor": 4,
        "type": "stream_end",
        "sessionId": "s",
        "data": {"reason": "idle"},
    }
    assert "keepalive" in [line["type"] for line in idle]


# -- OpenAPI ---------------------------------------------------------------------------------


def test_the_openapi_document_is_valid_and_names_every_route():
    from openapi_spec_validator import validate

    document = openapi_document()
    validate(document)
    assert set(document["paths"]) == {
        "/chat",
        "/steer",
        "/abort",
        "/sessions",
        "/sessions/{session_id}",
        "/sessions/{session_id}/trace",
        "/sessions/{session_id}/history",
        "/sessions/{session_id}/fork",
        "/sessions/{session_id}/answer",
        "/sessions/{session_id}/calls",
        "/agents",
        "/demo",
        "/demo/crash",
        "/wake",
    }
    chat = document["components"]["schemas"]["ChatRequest"]
    assert chat["required"] == ["prompt"] and chat["additionalProperties"] is False


def test_history_marks_a_reply_a_crash_cut_off():
    from fxdurable.http.session_routes import history_message
    from fxdurable.runtime.models.base import ChatMessage

    cut = history_message(ChatMessage(role="assistant", text="Once upon", interrupted=True))
    whole = history_message(ChatMessage(role="assistant", text="Once upon a time."))
    assert cut.model_dump(by_alias=True)["interrupted"] is True
    assert whole.model_dump(by_alias=True)["interrupted"] is False
