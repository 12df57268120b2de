"""Fallback models: when one model cannot answer, the next one in the chain does.

``Agent(model=[primary, backup, ...])`` is ``Agent(model=Fallback(primary, backup, ...))``.
Inside the runtime a switch is durable (docs/fallback.md): the model step asks
:func:`next_model` (pure, no I/O) whether a failure moves the turn on, records the switch on
the turn with a ``model.fallback`` event (``Journal.record_model_switch``), and calls the next
model. The turn stays on it to its end, through crashes: recovery reads the turn's ``model``
and goes on with that member (:func:`member`). The next turn starts again on the primary.

What moves a turn on: a failure of a class in ``on`` (by default
:class:`~fxdurable.errors.ModelOverloadedError`: HTTP 429, 503, 529, an overloaded or
rate-limit error in a stream) at once, without waiting out a backoff; and, with
``when_retries_exhausted``, a transient failure past the agent's ``ModelRetries.budget``,
which would otherwise fail the turn. The last model's failures are handled as a single
model's are.

Outside the runtime (``await anext(fallback.stream(request))``), ``stream`` tries the models
in order and moves on only while nothing has been streamed yet; nothing is recorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from fxdurable.errors import (
    ConfigurationError,
    ModelError,
    ModelOverloadedError,
    ModelRetryableError,
)
from fxdurable.runtime.models.base import ChatMessage, Model, ModelRequest, StreamPart

__all__ = ["Fallback", "Switch", "dropped_parts", "member", "members", "next_model", "wire_of"]


class Fallback:
    """A chain of models; the first is the primary. ``on``: the error classes that move a turn
    to the next model at once. ``when_retries_exhausted``: a transient failure that spends the
    turn's retry budget moves it on too, instead of failing it."""

    def __init__(
        self,
        *models: Model | str,
        on: Sequence[type[ModelError]] = (ModelOverloadedError,),
        when_retries_exhausted: bool = True,
    ) -> None:
        if len(models) < 2:
            raise ConfigurationError("a Fallback needs at least two models")
        resolved = tuple(_resolved(m) for m in models)
        names = [m.name for m in resolved]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            # The turn records which member it is on by name: names must tell them apart.
            raise ConfigurationError(f"a Fallback's models need distinct names; repeated: {twice}")
        for cls in on:
            if not (isinstance(cls, type) and issubclass(cls, ModelError)):
                raise ConfigurationError(f"Fallback(on=...) takes ModelError classes, not {cls!r}")
        self.models: tuple[Model, ...] = resolved
        self.on: tuple[type[ModelError], ...] = tuple(on)
        self.when_retries_exhausted = when_retries_exhausted

    @property
    def name(self) -> str:
        return "fallback(" + ", ".join(m.name for m in self.models) + ")"

    def __repr__(self) -> str:
        return f"Fallback({', '.join(repr(m.name) for m in self.models)})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        last = len(self.models) - 1
        for index, model in enumerate(self.models):
            started = False
            try:
                async for part in model.stream(request):
                    started = True
                    yield part
                return
            except ModelError as exc:
                retries_spent = isinstance(exc, ModelRetryableError)
                if started or index == last or not self._moves_on(exc, retries_spent):
                    raise

    def _moves_on(self, error: ModelError, retries_spent: bool) -> bool:
        if isinstance(error, self.on):
            return True
        return (
            retries_spent and self.when_retries_exhausted and isinstance(error, ModelRetryableError)
        )


@dataclass(frozen=True, slots=True)
class Switch:
    """Go on with ``to``: ``reason`` is what the trace says about why."""

    to: Model
    reason: str


def members(model: Model) -> tuple[Model, ...]:
    """The models a turn may use, the primary first (just ``model`` for a plain one)."""
    return model.models if isinstance(model, Fallback) else (model,)


def member(model: Model, name: str | None) -> Model:
    """The member a turn recorded it is on (``TurnRecord.model``); the primary for None or a
    name the chain no longer has (a redeploy changed it)."""
    for candidate in members(model):
        if candidate.name == name:
            return candidate
    return members(model)[0]


def next_model(
    model: Model, current: str | None, error: ModelError, *, retries_spent: bool
) -> Switch | None:
    """Whether ``error`` of the member named ``current`` moves the turn to the next member.
    ``retries_spent``: the failure spent the turn's transient-retry budget."""
    if not isinstance(model, Fallback):
        return None
    chain = model.models
    at = chain.index(member(model, current))
    if at == len(chain) - 1 or not model._moves_on(error, retries_spent):
        return None
    kind = type(error).__name__
    why = "its retries were spent" if not isinstance(error, model.on) else kind
    return Switch(chain[at + 1], f"{chain[at].name} failed ({why}): {error}")


# The wire each provider module writes into ``ToolCallRequest.wire`` (see docs/reasoning.md).
_WIRES = {
    "fxdurable.runtime.models.anthropic": "anthropic",
    "fxdurable.runtime.models.openai": "openai-chat",
    "fxdurable.runtime.models.openai_responses": "openai-responses",
}


def wire_of(model: Model) -> str | None:
    """The format of the provider-owned parts ``model`` reads back; None for a model that
    reads none (scripted, a custom model)."""
    return _WIRES.get(type(model).__module__)


def dropped_parts(messages: Sequence[ChatMessage], to: Model) -> int:
    """How many provider-owned parts of ``messages`` (thinking, reasoning items, signatures)
    the model ``to`` cannot read: its requests leave them out (each provider's request
    builder sends only parts of its own wire)."""
    wire = wire_of(to)
    return sum(
        len(call.parts)
        for message in messages
        for call in message.tool_calls
        if call.parts and call.wire != wire
    )


def _resolved(model: Model | str) -> Model:
    if isinstance(model, str):
        from fxdurable.runtime.models.providers import resolve_model

        return resolve_model(model)
    return model
