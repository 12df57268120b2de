"""Spending budgets: how many tokens and dollars a turn, or a session, may spend on its model.

Not the invocation's deadline (:mod:`fxdurable.runtime.budget`) nor the attempts budget
(``Durability``): this one counts what the model calls cost. The totals are on the turn's
record (``TurnRecord.spent`` and ``session_spent``, added to in the commit of each model call
and compaction), so a turn recovered after a crash counts what its dead attempt spent.

They are checked at every step boundary (:func:`~fxdurable.runtime.decide.at_boundary`, with
:func:`overspent` computing the fact): once a limit is reached, the turn takes no further step
and settles ``failed`` with ``budget_exhausted`` naming the limit, or, with
``on_exhausted="ask"``, asks a person (``needs_input``): each ``allow`` grants the turn one
more budget of the same size, ``deny`` fails it. That question expires after
``ask_timeout_s`` (None: never) and is then answered ``ask_on_timeout`` (``"deny"`` and
``"fail"`` settle the turn failed, ``"allow"`` grants one more budget), like any other
question's timeout (:func:`fxdurable.ask`). A final answer the records already hold is
never discarded: a turn whose last call answered completes. One call may go past a limit (a
call's cost is known when it ends); none starts after it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from fxdurable.core.records import TurnRecord, Usage
from fxdurable.errors import ConfigurationError

__all__ = ["SpendingBudget", "overspent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendingBudget:
    """Limits on what the model may spend; None: no limit. ``turn_*``: one turn's model calls
    (its compaction included); ``session_*``: every model call of the session so far. Token
    counts are the providers' ``input_tokens`` / ``output_tokens``; costs are ``cost_usd``,
    which needs the agent's ``Pricing``."""

    turn_input_tokens: int | None = None
    turn_output_tokens: int | None = None
    turn_cost_usd: float | None = None
    session_input_tokens: int | None = None
    session_output_tokens: int | None = None
    session_cost_usd: float | None = None
    # "fail": the turn settles failed (``budget_exhausted``); "ask": a person decides.
    on_exhausted: Literal["fail", "ask"] = "fail"
    # The "ask" question expires after this long (None: never) and is then answered
    # ``ask_on_timeout`` ("deny" and "fail" settle failed, "allow" grants one more budget).
    ask_timeout_s: float | None = None
    ask_on_timeout: Literal["deny", "allow", "fail"] = "deny"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _POSITIVE and value is not None and value <= 0:
                raise ConfigurationError(f"SpendingBudget.{f.name} must be positive, not {value}")
        if self.on_exhausted not in ("fail", "ask"):
            raise ConfigurationError(f"on_exhausted is 'fail' or 'ask', not {self.on_exhausted!r}")
        if self.ask_on_timeout not in ("deny", "allow", "fail"):
            raise ConfigurationError(
                f"ask_on_timeout is deny, allow or fail, not {self.ask_on_timeout!r}"
            )

    @property
    def counts_cost(self) -> bool:
        return self.turn_cost_usd is not None or self.session_cost_usd is not None


# (limit field, where it is counted, what it counts, the Usage field)
_LIMITS = (
    ("turn_input_tokens", "turn", "input tokens", "input_tokens"),
    ("turn_output_tokens", "turn", "output tokens", "output_tokens"),
    ("turn_cost_usd", "turn", "cost in USD", "cost_usd"),
    ("session_input_tokens", "session", "input tokens", "input_tokens"),
    ("session_output_tokens", "session", "output tokens", "output_tokens"),
    ("session_cost_usd", "session", "cost in USD", "cost_usd"),
)
# The fields that must be positive when set: the limits and the question's timeout.
_POSITIVE = frozenset(name for name, *_ in _LIMITS) | {"ask_timeout_s"}


def overspent(budget: SpendingBudget | None, turn: TurnRecord) -> str | None:
    """Which limit the turn has reached, as the message its failure carries; None when all
    are left. Each ``allow`` a person gave (``spend_grants``) adds one more budget."""
    if budget is None:
        return None
    share = 1 + turn.spend_grants
    for name, scope, what, usage_field in _LIMITS:
        limit = getattr(budget, name)
        if limit is None:
            continue
        spent_in: Usage = turn.spent if scope == "turn" else turn.session_spent
        spent = getattr(spent_in, usage_field) or 0
        if spent >= limit * share:
            granted = f" ({share} budgets granted)" if share > 1 else ""
            return (
                f"the {scope}'s spending budget {name}={limit:g}{granted} is spent: its model "
                f"calls used {spent:g} {what}"
            )
    return None
