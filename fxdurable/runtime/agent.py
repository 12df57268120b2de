"""An agent: a name, a model, instructions, tools and a durability budget."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fxdurable.core.records import Usage
from fxdurable.core.retention import check_retention_days
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.hooks import AfterTool, BeforeTool
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.output import OutputSpec
from fxdurable.runtime.spend import SpendingBudget
from fxdurable.runtime.tools import Tool
from fxdurable.runtime.webhooks import Webhook

__all__ = ["AfterTool", "Agent", "BeforeTool", "Durability", "ModelRetries", "Pricing"]

# ``before_tool`` runs before a tool's intent is recorded: None allows, a reason denies (the
# model reads it), ``fx.ask(question)`` asks a person. ``after_tool`` may replace the result
# the model reads. Both: :mod:`fxdurable.runtime.hooks`.


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRetries:
    """Transient model failures (429, 5xx, overloaded, timeouts) are retried with exponential
    backoff and jitter, honouring the provider's Retry-After; past ``budget`` failures in one
    turn the submission fails with ``model_error``. The count is durable: crashes do not
    reset it."""

    budget: int = 6
    base_s: float = 1.0
    max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.budget < 0 or self.base_s < 0 or self.max_s < self.base_s:
            raise ConfigurationError("ModelRetries needs budget >= 0 and 0 <= base_s <= max_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """US dollars per million tokens, for cost accounting in the journal and the trace.

    Input tokens read from the provider's prompt cache cost ``cache_read_per_mtok``, those
    written to it ``cache_write_per_mtok``; left unset, each costs ``input_per_mtok`` (no
    discount assumed, so a cost budget never undercounts). The providers charge, relative
    to the input price: Anthropic reads 0.1x, writes 1.25x (5-minute cache) or 2x (1 hour);
    OpenAI reads 0.1x-0.5x by model and writes at 1x (docs/caching.md)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __post_init__(self) -> None:
        prices = (
            self.input_per_mtok,
            self.output_per_mtok,
            self.cache_read_per_mtok,
            self.cache_write_per_mtok,
        )
        if any(price is not None and price < 0 for price in prices):
            raise ConfigurationError("Pricing needs prices >= 0")

    def cost_usd(self, usage: Usage) -> float:
        """What ``usage`` costs: uncached input, cache reads, cache writes and output."""
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        cached = usage.cache_read_tokens + usage.cache_creation_tokens
        uncached = max(usage.input_tokens - cached, 0)
        cost = (
            uncached * self.input_per_mtok
            + usage.cache_read_tokens * read
            + usage.cache_creation_tokens * write
            + usage.output_tokens * self.output_per_mtok
        ) / 1_000_000
        return round(cost, 8)


@dataclass(frozen=True, slots=True, kw_only=True)
class Durability:
    """Per-submission budgets (DESIGN §3.7): past either, the submission settles failed."""

    # The first run plus one per interruption (a crash, a lost lease); clean continuations at
    # a deadline do not consume attempts.
    max_attempts: int = 10
    timeout_s: float = 3600.0  # wall-clock seconds from the turn's start
    model_retries: ModelRetries = field(default_factory=ModelRetries)
    # Streamed text is written to the event log at most this often while a model call runs,
    # so a crash mid-stream leaves what was said visible. Fast calls write nothing extra.
    partial_text_every_s: float = 1.0
    # When interruptions spend ``max_attempts``: "fail" settles the submission failed; "ask"
    # asks a person instead (``needs_input``): ``allow()`` grants a fresh attempt budget,
    # ``deny()`` settles failed as "fail" would have. The time budget always fails.
    on_exhausted: Literal["fail", "ask"] = "fail"
    # The ``on_exhausted="ask"`` question expires after this long (None: never) and is then
    # answered ``ask_on_timeout`` ("deny" and "fail" settle failed, "allow" goes on).
    ask_timeout_s: float | None = None
    ask_on_timeout: Literal["deny", "allow", "fail"] = "deny"
    # Paused model calls in a row (Anthropic ``pause_turn``, a long server-tool loop) the
    # turn continues; past it the submission fails with ``model_paused``. Each continuation
    # is a recorded model call (a round) with its own usage.
    max_pauses: int = 8

    def __post_init__(self) -> None:
        if self.max_pauses < 0:
            raise ConfigurationError("max_pauses must be at least 0")
        if self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")
        if self.on_exhausted not in ("fail", "ask"):
            raise ConfigurationError(f"on_exhausted is 'fail' or 'ask', not {self.on_exhausted!r}")
        if self.timeout_s <= 0:
            raise ConfigurationError("timeout_s must be positive")
        if self.ask_timeout_s is not None and not self.ask_timeout_s > 0:
            raise ConfigurationError("ask_timeout_s must be positive")
        if self.ask_on_timeout not in ("deny", "allow", "fail"):
            raise ConfigurationError(
                f"ask_on_timeout is deny, allow or fail, not {self.ask_on_timeout!r}"
            )


class Agent:
    """A name, a model, instructions, tools and budgets. Immutable once built.

    ``model`` is a model object or a string such as ``"openai/gpt-4o-mini"`` or
    ``"anthropic/claude-sonnet-4-5"`` (keys and base URLs come from the environment), or a
    list of them: a :class:`~fxdurable.runtime.models.fallback.Fallback` chain, the first the
    primary (docs/fallback.md).

    ``spending``: limits on the tokens and dollars a turn or the session may spend on the
    model (:class:`~fxdurable.runtime.spend.SpendingBudget`, docs/budgets.md).

    ``parallel_tools``: consecutive calls of one response whose replay policy is ``safe`` or
    ``idempotent`` run concurrently, at most ``max_parallel_tools`` at a time; an ``unsafe``
    call runs alone at its position (:mod:`fxdurable.runtime.batch`). ``False``: every call
    runs after the one before it has settled.

    ``output_type``: the final answer is a JSON value of this type (a pydantic model, or any
    type a pydantic ``TypeAdapter`` validates), asked for as the provider's structured output
    and validated; an answer that does not validate is sent back with what was wrong, at
    most ``output_retries`` times, then the submission fails with ``output_invalid``
    (docs/typed-output.md). ``Submission.output`` is the validated value.

    ``webhook``: each submission's end (completed, failed or aborted) is POSTed, signed,
    at least once, to this :class:`~fxdurable.runtime.webhooks.Webhook` (docs/webhooks.md).

    ``retention_days``: an idle session whose last activity is older than this many days is
    erased by the retention sweep (``fxdurable scan``, the scan Lambda); None, the default,
    keeps sessions forever. Anything but a positive number or None raises
    :class:`~fxdurable.errors.ConfigurationError` (docs/erasure.md "Retention").

    ``version``: recorded on each turn it starts and each attempt it runs (``TurnRecord``,
    ``AttemptRecord``, the ``attempt.started`` event), so a rolling deploy's trace says which
    version ran what; undeclared, a digest of the instructions, the tools' names,
    descriptions, input schemas and replay policies, and the output schema.
    """

    __slots__ = (
        "after_tool",
        "before_tool",
        "durability",
        "instructions",
        "max_parallel_tools",
        "model",
        "name",
        "output",
        "output_retries",
        "parallel_tools",
        "pricing",
        "retention_days",
        "spending",
        "tools",
        "version",
        "webhook",
    )

    name: str
    model: Model
    instructions: str
    tools: tuple[Tool, ...]
    durability: Durability
    before_tool: BeforeTool | None
    after_tool: AfterTool | None
    pricing: Pricing | None
    spending: SpendingBudget | None
    parallel_tools: bool
    max_parallel_tools: int
    output: OutputSpec | None  # from ``output_type``: how the final answer is checked
    output_retries: int
    # Recorded on each turn and attempt it runs: declared, or a digest of what the model sees.
    version: str
    webhook: Webhook | None  # each settlement POSTed there (runtime/webhooks.py)
    # Days an idle session is kept after its last activity, then erased by the retention
    # sweep (``fxdurable scan``); None keeps it forever (docs/erasure.md "Retention").
    retention_days: float | None

    def __init__(
        self,
        name: str,
        model: Model | str | Sequence[Model | str],
        instructions: str = "",
        tools: Sequence[Tool] = (),
        durability: Durability | None = None,
        before_tool: BeforeTool | None = None,
        pricing: Pricing | None = None,
        after_tool: AfterTool | None = None,
        parallel_tools: bool = True,
        max_parallel_tools: int = 8,
        spending: SpendingBudget | None = None,
        output_type: Any = None,
        output_retries: int = 2,
        version: str | None = None,
        webhook: Webhook | None = None,
        retention_days: float | None = None,
    ) -> None:
        if not name:
            raise ConfigurationError("an agent needs a name: sessions are bound to it")
        if version is not None and (not isinstance(version, str) or not version.strip()):
            raise ConfigurationError(f"agent {name!r}: version must be a non-empty string")
        if max_parallel_tools < 1:
            raise ConfigurationError("max_parallel_tools must be at least 1")
        if output_retries < 0:
            raise ConfigurationError("output_retries must be at least 0")
        try:
            retention = check_retention_days(retention_days)
        except ValueError as exc:
            raise ConfigurationError(f"agent {name!r}: {exc}") from None
        if isinstance(model, str):
            from fxdurable.runtime.models.providers import resolve_model

            model = resolve_model(model)
        elif isinstance(model, Sequence):
            from fxdurable.runtime.models.fallback import Fallback

            model = Fallback(*model)
        if spending is not None and spending.counts_cost and pricing is None:
            raise ConfigurationError(
                f"agent {name!r} has a cost budget but no Pricing: its calls have no cost_usd"
            )
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigurationError(f"agent {name!r} has duplicate tools: {duplicates}")
        output = None if output_type is None else OutputSpec(output_type)
        values = {
            "name": name,
            "model": model,
            "instructions": instructions,
            "tools": tuple(tools),
            "durability": durability or Durability(),
            "before_tool": before_tool,
            "after_tool": after_tool,
            "pricing": pricing,
            "spending": spending,
            "parallel_tools": parallel_tools,
            "max_parallel_tools": max_parallel_tools,
            "output": output,
            "output_retries": output_retries,
            "version": version or _digest(name, instructions, tuple(tools), output),
            "webhook": webhook,
            "retention_days": retention,
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"Agent is immutable; build a new one instead of setting {key}")

    def __repr__(self) -> str:
        tools = ", ".join(t.name for t in self.tools)
        return f"Agent({self.name!r}, model={self.model.name!r}, tools=[{tools}])"

    def tool(self, name: str) -> Tool | None:
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None


def _digest(
    name: str, instructions: str, tools: tuple[Tool, ...], output: OutputSpec | None
) -> str:
    """An undeclared version: a digest of what the model is given — the instructions, each
    tool's name, description, input schema and replay policy, the output schema — so a
    deploy that changes any of them records another version (the model's name is not in it:
    a Fallback switch is not a new version)."""
    described = {
        "name": name,
        "instructions": instructions,
        "tools": [[t.name, t.description, t.json_schema(), t.replay, t.durable] for t in tools],
        "output": None if output is None else output.format.schema,
    }
    text = json.dumps(described, sort_keys=True, default=str, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
