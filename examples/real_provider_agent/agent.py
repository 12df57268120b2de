"""An invoicing agent on a real OpenAI-compatible provider, durable through a kill -9.

    python agent.py "Invoice ACME Corp 1200 EUR for the March retainer."

The model is ``$AGENT_MODEL`` (default ``openai/gpt-4o-mini``), reached at ``$OPENAI_BASE_URL``
with ``$OPENAI_API_KEY``, as the OpenAI SDK reads them. The turns are journaled in
``.fxd/invoices.db``; ``ledger.txt`` stands in for the billing system: ``send_invoice``
appends one line per invoice sent, ``list_invoices`` reads it back.

Run the same command again after the process was killed: the prompt has the same request id,
so it is the same submission, and the runtime resumes it from its last committed step.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
from pathlib import Path

import pydantic

import fxdurable as fx

STORE = "sqlite:///.fxd/invoices.db"
LEDGER = Path("ledger.txt")
MODEL = os.environ.get("AGENT_MODEL", "openai/gpt-4o-mini")
INSTRUCTIONS = (
    "You send invoices for a small consultancy. Use send_invoice once per invoice asked "
    "for. If a tool result says an operation was interrupted and may or may not have "
    "completed, call list_invoices to see whether the invoice went out before deciding "
    "anything; never send the same invoice twice. Answer in one or two sentences."
)


class Invoice(pydantic.BaseModel):
    customer: str = pydantic.Field(description="who pays, e.g. ACME Corp")
    amount_eur: int = pydantic.Field(description="the amount in whole euros")
    memo: str = pydantic.Field(description="what the invoice is for")


class NoInput(pydantic.BaseModel):
    pass


@fx.tool(replay="unsafe")
def send_invoice(inp: Invoice, ctx: fx.ToolContext) -> str:
    """Send an invoice to a customer. Not safe to repeat: each call sends one more invoice."""
    with LEDGER.open("a") as ledger:
        # The execution id names this call across crashes: a billing API would take it as
        # its idempotency key; here it tells which call sent which invoice.
        ledger.write(f"{ctx.execution_id}\t{inp.customer}\t{inp.amount_eur}\t{inp.memo}\n")
    return f"invoice sent to {inp.customer}: {inp.amount_eur} EUR ({inp.memo})"


@fx.tool(reuse=False)  # replay="safe" (a read); reuse=False: after a crash, read it afresh
def list_invoices(_: NoInput, ctx: fx.ToolContext) -> str:
    """List the invoices sent so far: customer, amount and memo of each."""
    lines = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    if not lines:
        return "no invoices sent yet"
    rows = [line.split("\t") for line in lines]
    return "\n".join(f"{customer}: {amount} EUR ({memo})" for _, customer, amount, memo in rows)


billing = fx.Agent(
    "billing",
    model=MODEL,
    instructions=INSTRUCTIONS,
    tools=[send_invoice, list_invoices],
)


def request_id(session: str, prompt: str) -> str:
    """The same prompt to the same session is the same request: running the command again
    after a crash continues it instead of sending a second invoice."""
    return "cli-" + hashlib.sha256(f"{session}\n{prompt}".encode()).hexdigest()[:24]


def describe(event: fx.EventRecord) -> str | None:
    """One line for the events worth showing; None for the rest."""
    data = event.data
    if event.type == "attempt.interrupted":
        return f"  attempt {data['number']} was interrupted (its process died); resuming"
    if event.type == "model.completed":
        called = data["tools"]
        tools = f" -> {', '.join(map(str, called))}" if isinstance(called, list) and called else ""
        return f"  model: {data['text']}{tools}" if data["text"] or tools else None
    if event.type.startswith("tool.") and event.type != "tool.step":
        what = event.type.removeprefix("tool.")
        if what == "started":
            return f"  tool {data['tool']} running ({data['policy']})"
        result = str(data["result"]).replace("\n", "; ")
        return f"  tool {data['tool']} {what}: {result}"
    return None


async def main(prompt: str, session_id: str) -> int:
    Path(".fxd").mkdir(exist_ok=True)
    async with fx.Runtime([billing], store=STORE) as runtime:
        session = runtime.session(session_id)
        submission = await session.submit(prompt, request_id=request_id(session_id, prompt))
        if submission.settled:
            print(
                f"this prompt was sent to session {session_id!r} before and its submission "
                f"{submission.id} is {submission.status}; to send it again, use another "
                "--session or other words"
            )
        elif submission.attempts:
            print(f"submission {submission.id} was admitted before: continuing it")
        cursor = submission.cursor - 1
        while True:
            # Settled first, then the events: the last read then has every event up to the end.
            submission = await session.submission(submission.id) or submission
            for event in await session.events(after=cursor):
                cursor = event.seq
                if (line := describe(event)) is not None:
                    print(line, flush=True)
            if submission.settled:
                break
            await asyncio.sleep(0.1)
    if submission.error is not None:
        print(f"{submission.status}: {submission.error.code}: {submission.error.message}")
    else:
        print(f"{submission.status}: {submission.result}")
    print(f"trace: fxdurable trace {session_id} --db .fxd/invoices.db")
    return 0 if submission.status == fx.SubmissionStatus.COMPLETED else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", help="what to invoice, in words")
    parser.add_argument("--session", default="billing", help="the session (default billing)")
    args = parser.parse_args()
    try:
        sys.exit(asyncio.run(main(args.prompt, args.session)))
    except fx.FxDurableError as exc:  # a configuration mistake: one line, not a traceback
        sys.exit(f"error: {exc}")
