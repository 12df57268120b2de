"""A durable tool step that raises (``ctx.step``): its error is recorded, and replay raises it
again, so the branch the tool took after it is the branch replayed (AWS durable conformance
scenario 1-10: a tool that catches a failed step, takes a fallback step and then crashes must
not run the failed step again on recovery, or both branches' effects happen).

Crashes are simulated as in ``test_durable_steps.py`` (the journal driven as a dead worker
would have left it); the real SIGKILLs are in ``tests/crash/test_crash_durable_steps.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
from fxrt_support import db_url, leave_crashed_turn
from test_durable_steps import recover, run_one

import fxdurable as fx
from fxdurable.core.journal import Fence, Journal
from fxdurable.runtime.steps import error_json, replayed_error


class CardDeclined(Exception):
    """What a payment provider's client raises: its arguments rebuild it."""

    def __init__(self, message: str, card: str) -> None:
        super().__init__(message, card)
        self.card = card


class Order(pydantic.BaseModel):
    name: str


def paying(log: list[str], *, declined: bool = True) -> fx.Tool:
    """``pay``: charges the card (step ``charge``); when the card is declined, invoices
    instead (step ``invoice``), the fallback branch."""

    async def pay(inp: Order, ctx: fx.ToolContext) -> str:
        def charge() -> str:
            log.append("charge")
            if declined:
                raise CardDeclined("card ending 4242 declined", "4242")
            return "charged"

        def invoice() -> str:
            log.append("invoice")
            return f"invoice for {inp.name}"

        try:
            return str(await ctx.step("charge", charge))
        except CardDeclined as exc:
            return f"{await ctx.step('invoice', invoice)} (card {exc.card} declined)"

    return fx.define_tool(
        "pay", description="Pay an order.", input_model=Order, execute=pay, durable=True
    )


def crash_after(url: str, steps: dict[str, tuple[str, str | None]]) -> Any:
    """A worker ran ``pay`` and recorded ``steps`` (name -> value, error), then died."""

    def midway(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s1")[0].id))
        journal.start_tool(fence, task.id, durable=True)
        for name, (value, error) in steps.items():
            journal.record_step(fence, task.id, name=name, value=value, error=error)

    return leave_crashed_turn(
        url, agent="ops", calls=[fx.call("pay", name="acme")], policies=["unsafe"], after=midway
    )


DECLINED = error_json(CardDeclined("card ending 4242 declined", "4242"))


def test_a_step_that_raises_is_recorded_and_its_error_propagates_as_raised(tmp_path):
    log: list[str] = []
    sub, (task,), _ = run_one(db_url(tmp_path), paying(log))
    assert sub.status.value == "completed"
    assert log == ["charge", "invoice"]
    assert task.result == "invoice for acme (card 4242 declined)"
    charge, invoice = task.steps
    assert (charge.name, charge.value, charge.run) == ("charge", "null", 1)
    assert json.loads(charge.error or "") == {
        "module": __name__,
        "qualname": "CardDeclined",
        "message": "('card ending 4242 declined', '4242')",
        "args": ["card ending 4242 declined", "4242"],
    }
    assert (invoice.name, invoice.value, invoice.error) == ("invoice", '"invoice for acme"', None)


def test_recovery_raises_the_recorded_error_again_and_takes_the_same_branch(tmp_path):
    """Killed after the failed charge was recorded: the card is not charged on recovery (it
    would succeed now), the fallback runs, and only its effect happened."""
    url = db_url(tmp_path)
    crashed = crash_after(url, {"charge": ("null", DECLINED)})
    log: list[str] = []
    sub, task, _, _ = recover(url, crashed, paying(log, declined=False))
    assert sub.status.value == "completed" and sub.interruptions == 1
    assert log == ["invoice"], "the recorded failed step must not run again"
    assert task.result == "invoice for acme (card 4242 declined)"
    assert [(s.name, s.run, s.error is not None) for s in task.steps] == [
        ("charge", 1, True),
        ("invoice", 2, False),
    ]


def test_a_crash_before_the_failure_was_recorded_runs_the_step_again(tmp_path):
    """At least once, as for any step: nothing recorded, so the charge runs again, and this
    time it succeeds: one branch, the charge's, and no invoice."""
    url = db_url(tmp_path)
    crashed = crash_after(url, {})
    log: list[str] = []
    _, task, _, _ = recover(url, crashed, paying(log, declined=False))
    assert log == ["charge"]
    assert task.result == "charged"
    assert [(s.name, s.error) for s in task.steps] == [("charge", None)]


def test_a_recorded_error_whose_class_cannot_be_rebuilt_is_a_recorded_step_error():
    class Local(Exception):  # a qualname with <locals>: not reachable from its module
        pass

    for text, error_type in [
        (error_json(Local("gone")), f"{__name__}.{Local.__qualname__}"),
        (
            json.dumps({"module": "not_loaded_here", "qualname": "E", "message": "m", "args": []}),
            "not_loaded_here.E",
        ),
        (error_json(CardDeclined("no", object())), f"{__name__}.CardDeclined"),  # args not JSON
    ]:
        exc = replayed_error("pay", "charge", text)
        assert isinstance(exc, fx.RecordedStepError), text
        assert (exc.step, exc.error_type) == ("charge", error_type)
        assert error_type in str(exc) and "replayed from its record" in str(exc)


def test_a_rebuilt_error_says_it_was_replayed():
    exc = replayed_error("pay", "charge", error_json(ValueError("bad amount", 3)))
    assert type(exc) is ValueError and exc.args == ("bad amount", 3)
    assert exc.__notes__ == ["replayed from the record of pay step 'charge'"]


def test_the_runtimes_own_errors_inside_a_step_are_not_recorded(tmp_path):
    """A misused ``ctx.state`` (an FxDurableError) is not the step's outcome: the call fails
    as before, with nothing recorded for the step."""

    async def misuse(inp: Order, ctx: fx.ToolContext) -> str:
        def bad() -> str:
            ctx.state[""] = 1  # an empty key: StateError
            return "unreachable"

        return str(await ctx.step("bad", bad))

    tool = fx.define_tool(
        "pay", description="Pay an order.", input_model=Order, execute=misuse, durable=True
    )
    _, (task,), _ = run_one(db_url(tmp_path), tool)
    assert task.status.value == "failed", task
    assert "non-empty string" in (task.result or ""), task.result
    assert task.steps == ()
