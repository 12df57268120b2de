"""The wake function on one SQS batch, in process: records grouped by session, sessions run
side by side, only the failed ones reported (``batchItemFailures``), a batch that comes too
late to run anything passed on."""

from __future__ import annotations

import pytest
from lambda_agents import BROKEN
from lambda_support import FakeContext, LambdaWorld, sqs_event

from fxdurable.aws_lambda.wake import WakeFunction
from fxdurable.errors import ConfigurationError
from fxdurable.queues.sqs import decode_wake
from tests.kit.story import done_text
from tests.kit.world import read_world


@pytest.fixture
def wake(lambda_world: LambdaWorld) -> WakeFunction:
    function = WakeFunction.from_env()
    yield function
    function.close()


def test_one_failing_session_fails_only_its_own_records(
    wake: WakeFunction, lambda_world: LambdaWorld
) -> None:
    lambda_world.admit("ok", "story b", "req-ok")
    lambda_world.admit("ok", "story c", "req-ok-2")  # a second wake for the same session
    lambda_world.admit("broken", "anything", "req-broken", agent=BROKEN)
    lambda_world.send("not a wake")
    messages = lambda_world.receive()
    assert len(messages) == 4
    by_body = {m["Body"]: m["MessageId"] for m in messages}

    answer = wake(sqs_event(messages), FakeContext(60))

    broken = [i for b, i in by_body.items() if b != "not a wake" and decode_wake(b)[0] == "broken"]
    failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    assert failed == {*broken, by_body["not a wake"]}
    state = read_world(lambda_world.store_url, lambda_world.world_dir)
    done = {s.request_id: s for s in state.submissions}
    assert done["req-ok"].result_text == done_text("b", "b")
    assert done["req-ok-2"].result_text == done_text("c", "c")
    # Two records, one run: both turns ran in a single attempt each, one after the other.
    assert [len(state.attempts[done[r].id]) for r in ("req-ok", "req-ok-2")] == [1, 1]
    # The broken session's lease was let go, so its redelivery need not wait out the TTL.
    assert state.sessions["broken"].lease.owner is None
    assert done["req-broken"].status != "completed"


def test_a_batch_with_no_time_left_for_a_step_is_passed_on(
    wake: WakeFunction, lambda_world: LambdaWorld
) -> None:
    lambda_world.admit("late", "story l", "req-late")
    messages = lambda_world.receive()
    # FXD_LAMBDA_MARGIN_S is 5: with 4 s left no step could finish in time.
    assert wake(sqs_event(messages), FakeContext(4)) == {"batchItemFailures": []}
    lambda_world.delete(messages)
    (passed_on,) = lambda_world.receive()
    assert decode_wake(passed_on["Body"])[:2] == ("late", "deferred (submitted)")
    assert not (lambda_world.world_dir / "model.log").exists()  # nothing ran


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("FXD_AGENTS", "", "needs FXD_AGENTS"),
        ("FXD_QUEUE", "local", "wakes must outlive the invocation"),
        ("FXD_LAMBDA_MARGIN_S", "soon", "FXD_LAMBDA_MARGIN_S must be a number"),
        ("FXD_LAMBDA_MARGIN_S", "0", "FXD_LAMBDA_MARGIN_S must be positive"),
    ],
)
def test_a_misconfigured_wake_function_says_what_to_fix(
    lambda_world: LambdaWorld, monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=says):
        WakeFunction.from_env()
