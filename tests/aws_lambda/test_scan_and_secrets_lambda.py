"""The scan function (wakes sessions with unsettled work and no live lease) and the secrets
every function loads from SSM at a cold start, against the moto server."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from aws_support import aws_session
from lambda_support import TOKENS, FakeContext, LambdaWorld, answer_json, api_event

from fxdurable.aws_lambda.http import HttpFunction
from fxdurable.aws_lambda.scan import ScanFunction
from fxdurable.aws_lambda.secrets import load_ssm_secrets
from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.errors import ConfigurationError
from fxdurable.queues.sqs import decode_wake
from fxdurable.testing.clock import FakeClock
from tests.kit.story import AGENT


def _claim(world: LambdaWorld, session: str, *, at: float, ttl_s: float) -> None:
    """``session``'s lease, taken at ``at`` by a sandbox that is gone."""
    store = open_store(world.store_url)
    try:
        journal = Journal(store, FakeClock(at), RandomIds())
        holder = WorkerIdentity(host="lambda/wake/gone", pid=8)
        assert journal.claim(session, holder, ttl_s=ttl_s) is not None
    finally:
        store.close()


@pytest.mark.parametrize("quiet_s", [0.0, 3600.0])
def test_the_scan_wakes_sessions_whose_lease_expired_and_skips_live_ones(
    lambda_world: LambdaWorld, monkeypatch: pytest.MonkeyPatch, quiet_s: float
) -> None:
    monkeypatch.setenv("FXD_SCAN_QUIET_S", str(quiet_s))
    for session in ("expired", "held", "unheld"):
        lambda_world.admit(session, f"story {session}", f"req-{session}")
    lambda_world.delete(lambda_world.receive())  # the admissions' wakes were "lost"
    now = time.time()
    _claim(lambda_world, "expired", at=now - 120, ttl_s=15)  # a killed invocation's lease
    _claim(lambda_world, "held", at=now, ttl_s=600)  # a live one
    scan = ScanFunction.from_env()
    try:
        summary = scan({"source": "aws.events"}, FakeContext(30))
    finally:
        scan.close()
    # A session nobody holds is woken only once it has been quiet for FXD_SCAN_QUIET_S: its
    # wake may still be queued. An expired lease never waits.
    woken = {"expired"} if quiet_s else {"expired", "unheld"}
    bodies = [decode_wake(m["Body"]) for m in lambda_world.receive()]
    assert summary == {"orphaned": len(woken), "woken": len(woken), "expired": 0}
    assert {(s, r) for s, r, _ in bodies} == {(s, "scan") for s in woken}


def _put_secrets(endpoint_url: str, path: str, values: dict[str, str]) -> None:
    ssm = aws_session().client("ssm", endpoint_url=endpoint_url)
    for name, value in values.items():
        ssm.put_parameter(Name=f"{path}/{name}", Value=value, Type="SecureString")


@pytest.fixture
def ssm_path(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", moto_server)  # boto3's own per-service override
    return f"/fxd-test-{uuid.uuid4().hex[:8]}/http"


def test_the_http_tokens_come_from_ssm_and_no_log_shows_them(
    lambda_world: LambdaWorld,
    moto_server: str,
    ssm_path: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = f"ssm-token-{uuid.uuid4().hex}"
    _put_secrets(moto_server, ssm_path, {"FXD_HTTP_TOKENS": f"carol={secret}"})
    monkeypatch.delenv("FXD_HTTP_TOKENS")
    monkeypatch.setenv("FXD_SECRETS_SSM_PATH", ssm_path)
    # INFO, the level a function logs at. (botocore's own DEBUG logs print response bodies,
    # secrets included, as for any AWS SDK call: never turn them on in production.)
    caplog.set_level(logging.INFO)
    http = HttpFunction.from_env()
    try:
        body = {"prompt": "story s", "agent": AGENT}
        answer = http(api_event("POST", "/chat", token=secret, body=body), FakeContext(30))
        refused = http(
            api_event("POST", "/chat", token=TOKENS["alice"], body=body), FakeContext(30)
        )
    finally:
        http.close()
    assert answer["statusCode"] == 202, answer
    assert answer_json(answer)["sessionId"]
    assert refused["statusCode"] == 401  # the environment's tokens were replaced by SSM's
    assert "FXD_HTTP_TOKENS" in caplog.text and secret not in caplog.text


def test_badly_named_secrets_are_a_configuration_error(moto_server: str, ssm_path: str) -> None:
    _put_secrets(moto_server, ssm_path, {"not-a-variable": "x"})
    with pytest.raises(ConfigurationError, match="named like environment variables"):
        load_ssm_secrets(ssm_path, {}, session=aws_session())
    environ: dict[str, str] = {}
    assert load_ssm_secrets(f"{ssm_path}-empty", environ, session=aws_session()) == []
    assert environ == {}
