"""What a user's first program does with the installed wheel, from an empty directory:
a local OpenAI-compatible server answering with the user's own policy
(``python -m fxdurable.testing.model_server --policy module:attr``), an agent on it through
``OPENAI_BASE_URL`` with a declared ``version=``, a tool retried by ``fx.Retry``, and a durable
tool whose failed step is recorded: killed right after that record (``FXD_CRASH_AT``) and run
again, the failure is replayed as the user's own exception class and the fallback branch is
taken again, the failed step not re-run.

The repository is not on ``sys.path`` here: the user's modules are imported from the working
directory, as ``python app.py`` and ``python -m`` import them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from wheel_support import clean_env, run, run_failing, wheel_venv

POLICY = '''
"""The user's scripted model: one tool, then the other, then what they returned."""
import fxdurable as fx


def billing(request):
    results = [m.text for m in request.messages if m.role == "tool"]
    if not results:
        return fx.reply("", fx.call("send_invoice", customer="acme"))
    if len(results) == 1:
        return fx.reply("", fx.call("provision", tenant="acme"))
    return fx.reply(" | ".join(results))
'''

BILLING = '''
"""The user's tools."""
import os
import pathlib

import pydantic

import fxdurable as fx

RUNS = pathlib.Path("runs.log")  # every run of a step or a tool, across processes


class QuotaError(Exception):
    def __init__(self, tenant: str) -> None:
        super().__init__(tenant)
        self.tenant = tenant


class Invoice(pydantic.BaseModel):
    customer: str


class Tenant(pydantic.BaseModel):
    tenant: str


def ran(what: str) -> None:
    with RUNS.open("a") as f:
        f.write(what + "\\n")


@fx.tool(replay="unsafe", retry=fx.Retry(attempts=3, backoff_s=0.01, on=(ConnectionRefusedError,)))
def send_invoice(inp: Invoice, ctx: fx.ToolContext) -> str:
    """Send the customer's invoice."""
    ran(f"send_invoice {ctx.execution_id}")
    if sum(1 for line in RUNS.read_text().splitlines() if line.startswith("send_invoice")) == 1:
        raise ConnectionRefusedError("mail server refused")
    return f"invoice sent to {inp.customer}"


def dedicated(tenant: str) -> str:
    ran(f"dedicated {os.getpid()}")
    raise QuotaError(tenant)


@fx.tool(durable=True)
async def provision(inp: Tenant, ctx: fx.ToolContext) -> str:
    """Provision a tenant: a dedicated one, or a shared one when over quota."""
    try:
        where = await ctx.step("dedicated", lambda: dedicated(inp.tenant))
    except QuotaError as exc:
        ran(f"fallback {type(exc).__module__}.{type(exc).__name__} {exc.tenant} {os.getpid()}")
        where = await ctx.step("shared", lambda: f"shared-{exc.tenant}")
    return f"tenant {where}"
'''

APP = """
import asyncio
import json
import sys

import fxdurable as fx
from billing import provision, send_invoice

agent = fx.Agent(
    "billing", "openai/scripted-billing", tools=[send_invoice, provision], version="billing-2"
)


async def main() -> None:
    async with fx.Runtime([agent], store="sqlite:///app.db") as rt:
        session = rt.session("acme")
        text = await session.run("Bill and provision acme.", request_id="acme-1")
        events = await session.events()
        print(json.dumps({
            "text": text,
            "retrying": [e.data["error"] for e in events if e.type == "tool.retrying"],
            "versions": sorted({
                e.data["agent_version"] for e in events if e.type == "attempt.started"
            }),
            "steps": [e.data["step"] for e in events if e.type == "tool.step"],
            "recorded_step_error": issubclass(fx.RecordedStepError, fx.FxDurableError),
        }))


asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_users_program_on_a_local_policy_server_retries_records_and_replays(
    tmp_path: Path,
) -> None:
    venv = wheel_venv()
    work = tmp_path / "work"
    work.mkdir()
    (work / "policy.py").write_text(POLICY)
    (work / "billing.py").write_text(BILLING)
    (work / "app.py").write_text(APP)
    py = str(venv.python)

    # A policy that does not import is said so, exit 2, before any port is taken.
    bad = run_failing(
        [py, "-m", "fxdurable.testing.model_server", "--policy", "nowhere:billing"],
        cwd=work,
        timeout=60,
        what="model_server with a missing policy",
    )
    assert "nowhere" in bad and "Traceback" not in bad, bad

    log = work / "requests.jsonl"
    server = subprocess.Popen(
        [
            py,
            "-m",
            "fxdurable.testing.model_server",
            "--port",
            "0",
            "--policy",
            "policy:billing",
            "--request-log",
            str(log),
        ],
        cwd=work,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()  # "OpenAI:    http://127.0.0.1:P/v1/chat/completions"
        assert first.startswith("OpenAI:"), first
        base = first.split()[-1].removesuffix("/chat/completions")
        env = clean_env(OPENAI_BASE_URL=base, OPENAI_API_KEY="sk-local-not-checked")

        # Killed right after the dedicated step's failure was recorded ...
        crashed = subprocess.run(
            [py, "app.py"],
            cwd=work,
            env={**env, "FXD_CRASH_AT": "tool.step.after-record:provision"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert crashed.returncode != 0, crashed.stdout + crashed.stderr
        # ... and run again: the same request id resumes the turn.
        out = run([py, "app.py"], cwd=work, env=env, timeout=120, what="the user's app")
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["text"] == "invoice sent to acme | tenant shared-acme", result
    assert result["versions"] == ["billing-2"], result
    assert result["recorded_step_error"] is True
    assert result["steps"] == ["dedicated", "shared"], result
    runs = (work / "runs.log").read_text().splitlines()
    # The dedicated step ran once, in the killed process; its recorded failure was replayed
    # in the second as billing.QuotaError with its argument, and the fallback taken there.
    dedicated = [line.split()[1] for line in runs if line.startswith("dedicated")]
    fallback = [line.split()[1:] for line in runs if line.startswith("fallback")]
    assert len(dedicated) == 1, runs
    assert len(fallback) == 1 and fallback[0][:2] == ["billing.QuotaError", "acme"], runs
    assert fallback[0][2] != dedicated[0], "the fallback ran in the killed process: no replay"
    invoices = [line.split()[1] for line in runs if line.startswith("send_invoice")]
    assert len(invoices) == 2 and len(set(invoices)) == 1, runs  # one execution, retried once
    assert result["retrying"] == ["ConnectionRefusedError: mail server refused"], result
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["model"] for r in requests} == {"scripted-billing"}, requests
    assert "sk-local" not in log.read_text()
    assert os.path.getsize(work / "app.db") > 0
