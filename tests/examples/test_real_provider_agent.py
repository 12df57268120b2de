"""``examples/real_provider_agent`` as a user runs it: copied into an empty directory, the
wheel installed, its README's commands run verbatim, with a scripted model served over HTTP
as the OpenAI-compatible provider that ``OPENAI_BASE_URL`` names (the real client, key and
streams), then killed with SIGKILL mid-invoice and run again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from examples_support import EXTRAS, copy_example, ok, readme_block, run_line, user_env
from wheel_support import wheel_venv

from fxdurable.backends import open_store
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import call, reply, turn_messages
from fxdurable.testing.model_server import Quirks, ScriptedModelServer

EXAMPLE = "real_provider_agent"
HERE = "tests/examples/test_real_provider_agent.py"
KEY = "sk-test-invoicing-0123456789"
MODEL = "scripted-invoicer"
_PROMPT = re.compile(r"Invoice (?P<customer>.+?) (?P<amount>\d+) EUR for the (?P<memo>.+?)\.$")

pytestmark = pytest.mark.slow


def invoicing_policy(request: ModelRequest) -> ModelResponse:
    """A careful model: sends the invoice asked for; told that the call's outcome is unknown,
    reads the ledger, and sends again only if the invoice is not there."""
    turn = turn_messages(request)
    asked = _PROMPT.search(turn[0].text)
    assert asked is not None, f"an unexpected prompt: {turn[0].text!r}"
    customer, amount, memo = asked["customer"], int(asked["amount"]), asked["memo"]
    send = call("send_invoice", customer=customer, amount_eur=amount, memo=memo)
    results = [m for m in turn if m.role == "tool"]
    if not results:
        return reply(f"Sending the invoice to {customer}.", send)
    last = results[-1]
    if last.tool_name == "send_invoice":
        if "may or may not have completed" in last.text:
            return reply(
                "The invoice may or may not have gone out; checking the ledger first.",
                call("list_invoices"),
            )
        return reply(f"Invoice sent to {customer}: {amount} EUR for the {memo}.")
    if f"{customer}: {amount} EUR ({memo})" in last.text:
        return reply(
            f"The interrupted invoice to {customer} did go out ({amount} EUR, {memo}), "
            "so I did not send it again."
        )
    return reply("It did not go out; sending it now.", send)


def provider_env(server: ScriptedModelServer) -> dict[str, str]:
    """What the README's set-up block exports, pointed at the scripted server."""
    return {
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": KEY,
        "AGENT_MODEL": f"openai/{MODEL}",
    }


def ledger(project: Path) -> list[list[str]]:
    path = project / "ledger.txt"
    return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []


def assert_every_request_was_authorised(server: ScriptedModelServer) -> None:
    assert server.requests, "the agent never called the model"
    assert {r.status for r in server.requests} == {200}, [r.status for r in server.requests]
    assert {r.body["model"] for r in server.requests} == {MODEL}


def test_an_invoice_is_sent_once(tmp_path: Path) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    venv = wheel_venv(EXTRAS)
    quirks = Quirks(require_api_key=KEY, pretty_arguments=True)
    with ScriptedModelServer(invoicing_policy, quirks=quirks) as server:
        env = user_env(venv, **provider_env(server))
        send, show = readme_block(EXAMPLE, f"{HERE}::test_an_invoice_is_sent_once")
        out = ok(run_line(send, cwd=project, env=env))
        assert_every_request_was_authorised(server)
    assert "tool send_invoice running (unsafe)" in out
    assert "completed: Invoice sent to ACME Corp: 1200 EUR for the March retainer." in out
    assert "trace: fxdurable trace billing --db .fxd/invoices.db" in out
    [(execution_id, *invoice)] = ledger(project)
    assert invoice == ["ACME Corp", "1200", "March retainer"]
    assert execution_id in ok(run_line(show, cwd=project, env=env))
    # The key went into the Authorization header only: not into the journal.
    assert KEY.encode() not in (project / ".fxd" / "invoices.db").read_bytes()


def test_killed_after_sending_the_next_run_checks_instead_of_sending_again(
    tmp_path: Path,
) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    venv = wheel_venv(EXTRAS)
    test_id = f"{HERE}::test_killed_after_sending_the_next_run_checks_instead_of_sending_again"
    crash, again, show, trace, check = readme_block(EXAMPLE, test_id)
    with ScriptedModelServer(invoicing_policy, quirks=Quirks(require_api_key=KEY)) as server:
        env = user_env(venv, **provider_env(server))
        killed = run_line(crash, cwd=project, env=env)
        assert killed.killed, (killed.returncode, killed.stdout, killed.stderr)
        assert "crash injected at tool.after-execute:send_invoice" in killed.stderr
        assert len(ledger(project)) == 1, "the invoice went out before the kill"
        asked_before_the_crash = len(server.requests)

        out = ok(run_line(again, cwd=project, env=env))
        assert_every_request_was_authorised(server)
        told = [m for r in server.model_requests[asked_before_the_crash:] for m in r.messages]
    assert "was admitted before: continuing it" in out
    assert "attempt 1 was interrupted (its process died); resuming" in out
    assert "tool send_invoice outcome_unknown:" in out
    assert "-> list_invoices" in out
    assert "completed: The interrupted invoice to Globex did go out" in out
    assert any(m.role == "tool" and "may or may not have completed" in m.text for m in told), (
        "the model was not told that the invoice's outcome is unknown"
    )

    [(execution_id, *invoice)] = ledger(project)  # one invoice: never sent twice
    assert invoice == ["Globex", "800", "April audit"]
    assert execution_id in ok(run_line(show, cwd=project, env=env))
    store = open_store(f"sqlite:///{project / '.fxd' / 'invoices.db'}", create=False)
    try:
        tasks = store.read(lambda view: view.session_tool_tasks("billing"))
    finally:
        store.close()
    sends = [t for t in tasks if t.tool == "send_invoice"]
    assert [(t.execution_id, t.status) for t in sends] == [(execution_id, "outcome_unknown")]

    timeline = ok(run_line(trace, cwd=project, env=env))
    assert "outcome_unknown" in timeline and "list_invoices" in timeline
    assert "every invariant holds" in ok(run_line(check, cwd=project, env=env))


def test_a_wrong_key_fails_the_turn_with_one_line_and_the_same_prompt_says_it_was_sent(
    tmp_path: Path,
) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    send, _ = readme_block(EXAMPLE, f"{HERE}::test_an_invoice_is_sent_once")
    with ScriptedModelServer(invoicing_policy, quirks=Quirks(require_api_key=KEY)) as server:
        wrong_key = provider_env(server) | {"OPENAI_API_KEY": "sk-wrong-0"}
        env = user_env(wheel_venv(EXTRAS), **wrong_key)
        first = run_line(send, cwd=project, env=env)
        again = run_line(send, cwd=project, env=env)
        host = server.url.removeprefix("http://")
    for ran in (first, again):
        assert ran.returncode == 1, (ran.stdout, ran.stderr)
        assert "Traceback" not in ran.stdout + ran.stderr
        assert "sk-wrong-0" not in ran.stdout + ran.stderr
        assert "failed: model_error:" in ran.stdout and "HTTP 401" in ran.stdout
        # It names the endpoint that refused (OPENAI_BASE_URL's, not "OpenAI") and the key's
        # variable.
        assert f"{host} rejected the credentials" in ran.stdout
        assert "environment variable OPENAI_API_KEY" in ran.stdout
    assert "was sent to session 'billing' before" in again.stdout
    assert ledger(project) == []
    assert [r.status for r in server.requests] == [401]  # a 401 is not retried, nor re-sent
