"""The HTTP function through its Lambda adapter: API Gateway HTTP API (payload 2.0) events
in, Lambda proxy answers out, against a moto SQS queue and a SQLite file store. Receipt mode:
POST /chat answers 202 and only enqueues; GET /chat long-polls from a cursor."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from lambda_support import (
    TOKENS,
    FakeContext,
    LambdaWorld,
    answer_json,
    answer_lines,
    api_event,
    handled,
    sqs_event,
)

from fxdurable.aws_lambda.http import HttpFunction
from fxdurable.aws_lambda.wake import WakeFunction
from fxdurable.errors import ConfigurationError
from fxdurable.http.lines import line_adapter
from fxdurable.queues.sqs import decode_wake
from tests.kit.story import AGENT

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
CONTEXT = FakeContext(30)


@pytest.fixture
def http(lambda_world: LambdaWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpFunction]:
    monkeypatch.setenv("FXD_HTTP_LONG_POLL_S", "0.5")
    function = HttpFunction.from_env()
    yield function
    function.close()


def _chat(http: HttpFunction, token: str = ALICE, **body: object) -> dict:
    return http(
        api_event("POST", "/chat", token=token, body={"prompt": "story h", "agent": AGENT, **body}),
        CONTEXT,
    )


def _poll(http: HttpFunction, session: str, cursor: int, token: str = ALICE) -> dict:
    query = {"sessionId": session, "cursor": str(cursor)}
    return http(api_event("GET", "/chat", query=query, token=token), CONTEXT)


def _valid(lines: list[dict]) -> list[dict]:
    for line in lines:
        line_adapter().validate_json(json.dumps(line))
    return lines


def test_post_chat_answers_202_with_a_receipt_and_only_enqueues(
    http: HttpFunction, lambda_world: LambdaWorld
) -> None:
    answer = _chat(http, sessionId="ops-1")
    assert answer["statusCode"] == 202, answer
    receipt = answer_json(answer)
    assert set(receipt) == {"sessionId", "submissionId", "cursor"}
    assert receipt["sessionId"] == "ops-1" and isinstance(receipt["cursor"], int)
    assert answer["headers"]["x-fxd-submission-id"] == receipt["submissionId"]
    # One wake on SQS for the session's store key; no turn ran in the HTTP function.
    (message,) = lambda_world.receive()
    assert decode_wake(message["Body"])[:2] == ("alice/ops-1", "submitted")
    session = lambda_world.session("alice/ops-1")
    assert session is not None and session.lease.owner is None
    assert not (lambda_world.world_dir / "model.log").exists()


def test_an_idempotent_retry_is_the_same_receipt(http: HttpFunction) -> None:
    def post(*, base64_body: bool) -> dict:
        body = {"prompt": "story i", "agent": AGENT}
        headers = {"Idempotency-Key": "k-1"}
        event = api_event("POST", "/chat", token=ALICE, body=body, headers=headers,
                          base64_body=base64_body)  # fmt: skip
        return http(event, CONTEXT)

    # API Gateway base64-encodes some bodies: the same request either way.
    first, again = post(base64_body=False), post(base64_body=True)
    assert first["statusCode"] == again["statusCode"] == 202
    assert answer_json(first) == answer_json(again)


def test_the_long_poll_reads_from_the_cursor_until_the_wake_function_ends_the_turn(
    http: HttpFunction, lambda_world: LambdaWorld
) -> None:
    receipt = answer_json(_chat(http, sessionId="ops-2"))
    # The admission is already a line: the poll answers at once with the turn's start.
    start = _valid(answer_lines(_poll(http, "ops-2", receipt["cursor"])))
    assert [line["type"] for line in start] == ["turn_start"]
    assert start[0]["turnId"] == receipt["submissionId"] and start[0]["sessionId"] == "ops-2"
    assert start[0]["cursor"] == receipt["cursor"] + 1
    # Nothing runs the turn yet: the poll waits out FXD_HTTP_LONG_POLL_S and says where to
    # poll from again.
    (idle,) = _valid(answer_lines(_poll(http, "ops-2", start[-1]["cursor"])))
    assert idle["type"] == "stream_end" and idle["data"] == {"reason": "idle"}
    assert idle["cursor"] == start[-1]["cursor"]
    # The wake function takes the queued wake and runs the turn to rest.
    wake = WakeFunction.from_env()
    try:
        messages = lambda_world.receive()
        assert wake(sqs_event(messages), FakeContext(60)) == {"batchItemFailures": []}
        assert handled(messages, {"batchItemFailures": []}) == messages
    finally:
        wake.close()
    rest = _valid(answer_lines(_poll(http, "ops-2", idle["cursor"])))
    assert rest[-1]["type"] == "turn_end" and rest[-1]["data"]["outcome"] == "completed"
    cursors = [line["cursor"] for line in start + rest]
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors)))  # each once, in order


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_a_caller_without_a_valid_token_gets_401(http: HttpFunction, token: str | None) -> None:
    for event in (
        api_event("POST", "/chat", token=token, body={"prompt": "story x", "agent": AGENT}),
        api_event("GET", "/chat", query={"sessionId": "ops-1", "cursor": "0"}, token=token),
    ):
        answer = http(event, CONTEXT)
        assert answer["statusCode"] == 401, answer
        assert answer_json(answer)["code"] == "unauthorized"


def test_another_callers_session_is_404_as_on_the_server(
    http: HttpFunction, lambda_world: LambdaWorld
) -> None:
    assert _chat(http, sessionId="mine")["statusCode"] == 202
    for answer in (
        _poll(http, "mine", 0, token=BOB),
        http(api_event("GET", "/sessions/mine", token=BOB), CONTEXT),
    ):
        assert answer["statusCode"] == 404, answer
        assert answer_json(answer)["code"] == "session_not_found"
    assert _poll(http, "mine", 0)["statusCode"] == 200  # alice's own


def test_the_http_function_refuses_an_in_process_queue(
    lambda_world: LambdaWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FXD_QUEUE", "local")
    with pytest.raises(ConfigurationError, match="wakes must outlive the invocation"):
        HttpFunction.from_env()
