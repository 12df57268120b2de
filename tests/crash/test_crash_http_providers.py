"""The crash suite over the real model boundary: httpx + SSE against the wire-format server.

Each run of ``driver.py --provider openai|anthropic`` starts a ``ScriptedModelServer`` in the
driver process serving the same scripted policy as the in-process suite, with real-model
quirks on (pretty-printed and split tool arguments, usage after the finish, the response held
open after the finish, the body in 7-byte chunks) and the API key required; the agent's model
is ``OpenAIModel`` / ``AnthropicModel`` with the key from the environment. A SIGKILL takes the
server down with the worker; the next run starts a fresh one (a new port, same policy).

Crash points over HTTP, per provider format: ``model.before-request``, ``model.mid-stream``
(with every streamed delta written as a partial: the aborted text must stay visible),
``model.after-finish`` and ``tool.after-execute:deploy`` (the unknown outcome must reach the
provider as the deploy's tool result). Each is followed by the run to rest, the shared
invariant checker and the next message, as in ``test_crash_suite.py``. Then the API key: never
in the store as stored (SQLite's raw bytes of ``.db``, ``-wal``, ``-shm``; every live row of
the PostgreSQL schema), the driver's output or the outside world's files, not even when a
gateway quotes it back in its 401.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from crash_harness import CrashHarness, assert_clean, assert_crashed
from driver import API_KEY, HOLD_OPEN_S, TEXT_CHUNK_CHARS, WRONG_KEY
from postgres_support import schema_raw
from test_crash_suite import (
    check_execute_deploy,
    check_model_before_request,
    check_model_cut_off,
    check_partial_closed_out,
)

from tests.kit.story import NEXT_REQUEST, OPENING, SESSION, STORY_REQUEST, UNKNOWN_MARK
from tests.kit.world import World, assert_invariants

pytestmark = pytest.mark.crash

PROVIDERS = ["openai", "anthropic"]
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
CREDENTIAL_HEADER = {"openai": "authorization", "anthropic": "x-api-key"}
KEYS = (API_KEY, WRONG_KEY)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def http_crash(store_url: str, workdir: Path, provider: str) -> CrashHarness:
    return CrashHarness(store_url, workdir, provider=provider)


# -- what the server saw ---------------------------------------------------------------------


def server_runs(workdir: Path) -> list[dict[str, Any]]:
    """One entry per driver process that exited cleanly (a SIGKILLed one writes nothing)."""
    path = workdir / "http.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tool_results(provider: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(call id, text)`` of every tool result in a provider request body, in order."""
    out: list[tuple[str, str]] = []
    for message in body["messages"]:
        if provider == "openai" and message["role"] == "tool":
            out.append((message["tool_call_id"], message["content"]))
        elif provider == "anthropic" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content", "")
                    if isinstance(content, list):
                        content = "".join(b.get("text", "") for b in content)
                    out.append((block["tool_use_id"], content))
    return out


def assert_served_over_http(world: World, provider: str, workdir: Path) -> None:
    """Every clean run talked to the server in the provider's format, key sent and accepted,
    and the quirks came through: the arguments' text as sent, usage read after the finish."""
    runs = server_runs(workdir)
    assert runs, "no clean driver run recorded what its model server saw"
    for run in runs:
        assert run["provider"] == provider, run["provider"]
        for request in run["requests"]:
            assert request["path"] == PATHS[provider], request["path"]
            assert request["status"] == 200, (request["status"], request["path"])
            # The server saw a credential (it requires one) and keeps it out of its record.
            assert request["headers"][CREDENTIAL_HEADER[provider]] == "[REDACTED]"
    # Pretty-printed, 5-character argument fragments reassembled, and kept as the model sent
    # them (byte for byte: no re-serialising).
    expected = {"charge": {"order": "42", "amount_cents": 4200}, "deploy": {"version": "2.0"}}
    for tool, arguments in expected.items():
        recorded = world.task(tool).arguments
        assert json.loads(recorded) == arguments, recorded
        assert recorded == json.dumps(json.loads(recorded), indent=2), "pretty, as sent"
    for call in world.model_calls[world.submission().id]:
        assert call.usage.input_tokens > 0 and call.usage.output_tokens > 0, call


def recover_promptly(crash: CrashHarness) -> World:
    """The run to rest, checked; every response is held open ``HOLD_OPEN_S`` after its finish,
    so a client waiting for the close would take that long per model call. (With a hold of
    2 s, a prompt recovery with 2 calls took 4.4 s on a loaded machine: the process start and
    the tools alone can exceed one hold.)"""
    started = time.monotonic()
    world = crash.recover()
    elapsed = time.monotonic() - started
    (run,) = server_runs(crash.workdir)[-1:]
    calls = len(run["requests"])
    assert calls >= 2, run
    assert elapsed < calls * HOLD_OPEN_S, (
        f"{calls} model calls took {elapsed:.1f}s: the client waited for held-open responses "
        "to close instead of stopping at the finish"
    )
    return world


def events_of(crash: CrashHarness) -> list[Any]:
    return crash.read(lambda view: list(view.events(SESSION)))


def story_id(crash: CrashHarness) -> str:
    def body(view: Any) -> str:
        (sub,) = [s for s in view.submissions(SESSION) if s.request_id == STORY_REQUEST]
        return str(sub.id)

    return crash.read(body)


def of_round(events: list[Any], type_: str, turn: str, round_: int) -> list[Any]:
    return [
        e for e in events if e.type == type_ and e.turn_id == turn and e.data.get("round") == round_
    ]


# -- crash points over HTTP ------------------------------------------------------------------


def check_unknown_deploy_reached_the_model(crash: CrashHarness, world: World) -> None:
    """The first request of the recovered run carried the unknown outcome, over the wire, as
    the deploy's tool result: the model was told, in its own format."""
    deploy = world.task("deploy")
    assert deploy.provider_id, deploy
    (run, *_) = server_runs(crash.workdir)  # the crash run wrote nothing: this is the recovery
    first = run["requests"][0]
    results = tool_results(crash.provider, first["body"])
    assert results[-1] == (deploy.provider_id, deploy.result), results
    assert UNKNOWN_MARK in results[-1][1]
    assert sum(UNKNOWN_MARK in text for _, text in results) == 1, results


CASES: list[tuple[str, Callable[[World], None]]] = [
    ("model.before-request", check_model_before_request),
    ("model.after-finish", check_model_cut_off),
    ("tool.after-execute:deploy", check_execute_deploy),
]


@pytest.mark.parametrize(("spec", "check"), [pytest.param(*c, id=c[0]) for c in CASES])
def test_crash_point_over_http(
    http_crash: CrashHarness, provider: str, spec: str, check: Callable[[World], None]
) -> None:
    http_crash.crash(spec)
    world = recover_promptly(http_crash)
    check(world)
    assert_served_over_http(world, provider, http_crash.workdir)
    if spec == "tool.after-execute:deploy":
        check_unknown_deploy_reached_the_model(http_crash, world)
    http_crash.follow_up()


def test_mid_stream_over_http(http_crash: CrashHarness, provider: str) -> None:
    """Killed after the first streamed delta of the story's first answer: the text streamed so
    far is in the event log as a partial of a round never recorded; the recovered turn shows
    it to the model with the note, asks again and records that round exactly once."""
    http_crash.partial_every = 0.0  # every delta is written before the next is read
    http_crash.crash("model.mid-stream")
    turn = story_id(http_crash)
    events = events_of(http_crash)
    partials = of_round(events, "model.partial", turn, 0)
    assert partials, [e.type for e in events]
    assert not [e for e in events if e.type == "model.completed"], "round 0 was recorded"
    cut_off = "".join(str(e.data["text"]) for e in partials)
    assert cut_off == OPENING[:TEXT_CHUNK_CHARS], cut_off  # the one delta before the kill

    world = recover_promptly(http_crash)
    check_model_cut_off(world)
    check_partial_closed_out(http_crash, world, cut_off)  # over the wire, as the model read it
    assert_served_over_http(world, provider, http_crash.workdir)
    events = world.events
    (completed,) = of_round(events, "model.completed", turn, 0)
    assert completed.data["text"] == OPENING
    kept = of_round(events, "model.partial", turn, 0)
    assert kept[0].seq == partials[0].seq and kept[0].data == partials[0].data
    assert kept[0].seq < completed.seq
    http_crash.follow_up()


# -- the API key -----------------------------------------------------------------------------


def raw_store(store_url: str) -> dict[str, bytes]:
    """The store as stored: SQLite's files (``.db``, ``-wal``, ``-shm``) as bytes, or every
    live row of the PostgreSQL schema (``schema_raw``)."""
    if store_url.startswith("postgres"):
        return {"the PostgreSQL schema's rows": schema_raw(store_url)}
    db = Path(store_url.removeprefix("sqlite:///"))
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return {p.name: p.read_bytes() for p in files if p.exists()}


def assert_no_key(where: str, data: str | bytes) -> None:
    for key in KEYS:
        needle: str | bytes = key.encode() if isinstance(data, bytes) else key
        assert needle not in data, f"the API key {key!r} is in {where}"


def assert_no_key_anywhere(
    store_url: str, workdir: Path, results: list[tuple[int, str, str]]
) -> dict[str, bytes]:
    files = raw_store(store_url)
    assert files, store_url
    for name, data in files.items():
        assert_no_key(name, data)
    for path in workdir.iterdir():
        assert_no_key(str(path), path.read_bytes())
    for _code, out, err in results:
        assert_no_key("the driver's stdout", out)
        assert_no_key("the driver's stderr", err)
    return files


def outcome(stdout: str) -> dict[str, Any]:
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("outcome ")]
    return dict(json.loads(line.removeprefix("outcome ")))


def test_api_key_never_stored_or_printed(
    http_crash: CrashHarness, provider: str, store_url: str
) -> None:
    results = []
    # Killed right after a response that was requested with the key: on SQLite the WAL is
    # left as it was, uncheckpointed.
    spec = "model.after-finish"
    results.append(http_crash.run(spec))
    assert_crashed(results[-1], spec)
    files = assert_no_key_anywhere(store_url, http_crash.workdir, results)
    if store_url.startswith("sqlite"):
        assert any(name.endswith("-wal") for name in files), sorted(files)

    results.append(http_crash.run())
    assert_clean(results[-1], "the run to rest")
    results.append(http_crash.run(follow_up=True))
    assert_clean(results[-1], "the follow-up run")
    world = http_crash.world()
    assert_invariants(world, [STORY_REQUEST, NEXT_REQUEST], sessions=1)
    assert_served_over_http(world, provider, http_crash.workdir)
    assert_no_key_anywhere(store_url, http_crash.workdir, results)


def test_a_wrong_key_quoted_back_is_never_stored(http_crash: CrashHarness, provider: str) -> None:
    """The server answers 401 and, like some gateways, quotes the key it got."""
    result = http_crash.run(extra_args=["--wrong-key"])
    assert_clean(result, "the run with a wrong key")
    said = outcome(result[1])
    assert said["status"] == "failed", said
    error = said["error"]
    assert error["code"] == "model_error", error
    assert "401" in error["msg"], error
    assert ("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY") in error["msg"]
    assert "***" in error["msg"], error  # the quoted key, redacted by the client
    (run,) = server_runs(http_crash.workdir)
    assert run["echoed"] == 1, run
    assert [r["status"] for r in run["requests"]] == [401], run
    world = http_crash.world()
    assert_invariants(world, [STORY_REQUEST], sessions=1)
    sub = world.submission()
    assert sub.error is not None and sub.error.code == "model_error", sub.error
    assert "***" in sub.error.message, sub.error
    assert_no_key_anywhere(http_crash.store_url, http_crash.workdir, [result])
    assert_no_key("the submission's error", json.dumps([sub.error.message, said]))
    for event in world.events:
        assert_no_key(f"event {event.type}", json.dumps(event.data))
