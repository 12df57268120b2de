"""An agent: a name, a model, instructions, tools and a durability budget."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.tools import Tool

__all__ = ["Agent", "BeforeTool", "Durability"]

# Runs before a tool's intent is recorded; returns None to allow or a reason to deny (the
# model reads the reason). A crash inside it leaves no task running and nothing unknown.
BeforeTool = Callable[[str, str], Awaitable[str | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Durability:
    """Per-submission budgets (DESIGN §3.7): past either, the submission settles failed."""

    # The first run plus one per interruption (a crash, a lost lease); clean continuations at
    # a deadline do not consume attempts.
    max_attempts: int = 10
    timeout_s: float = 3600.0  # wall-clock seconds from the turn's start

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")
        if self.timeout_s <= 0:
            raise ConfigurationError("timeout_s must be positive")


@dataclass(frozen=True, slots=True)
class Agent:
    name: str
    model: Model
    instructions: str = ""
    tools: Sequence[Tool] = ()
    durability: Durability = field(default_factory=Durability)
    before_tool: BeforeTool | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("an agent needs a name: sessions are bound to it")
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigurationError(f"agent {self.name!r} has duplicate tools: {duplicates}")

    def tool(self, name: str) -> Tool | None:
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None
