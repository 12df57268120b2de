"""The framework releases each adapter was tested with, checked before the framework is imported.

Each adapter reads its framework's public API (pydantic-ai's models, toolsets and message parts;
the Agents SDK's ``Agent`` fields, ``FunctionTool`` and ``Model`` interface; LangChain's
``BaseChatModel`` and ``BaseTool``). A release outside the tested range may have moved any of
them, so importing the adapter fails first, with one message naming what is installed and what
to install, instead of an ``AttributeError`` deep in a turn. One table for the three adapters:
the extras in pyproject.toml pin the same ranges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from fxdurable.errors import ConfigurationError

__all__ = [
    "LANGCHAIN",
    "OPENAI_AGENTS",
    "PYDANTIC_AI",
    "Framework",
    "UnsupportedFrameworkError",
]

Release = tuple[int, int]


class UnsupportedFrameworkError(ConfigurationError):
    """The framework is missing or outside the range its adapter was tested with."""


@dataclass(frozen=True, slots=True)
class Framework:
    """One adapter's framework: its distribution and the ``[low, high)`` minor releases that
    the adapter's tests ran on."""

    adapter: str  # the module under fxdurable.adapters
    distribution: str  # what pip installs and importlib.metadata reads
    extra: str  # fxdurable's extra that pins it
    low: Release
    high: Release

    @property
    def supported(self) -> tuple[Release, Release]:
        return self.low, self.high

    @property
    def range(self) -> str:
        return f">={self.low[0]}.{self.low[1]},<{self.high[0]}.{self.high[1]}"

    def check(self, version: str | None = None) -> str:
        """Return the installed version (or ``version``, when given), or raise
        :class:`UnsupportedFrameworkError` naming it and the supported range."""
        where, wanted = f"fxdurable.adapters.{self.adapter}", self.distribution + self.range
        if version is None:
            try:
                version = metadata.version(self.distribution)
            except metadata.PackageNotFoundError:
                raise UnsupportedFrameworkError(
                    f"{where} needs {wanted}, which is not installed: "
                    f"pip install 'fxdurable[{self.extra}]'"
                ) from None
        parsed = re.match(r"(\d+)\.(\d+)", version)
        found = (int(parsed.group(1)), int(parsed.group(2))) if parsed else None
        if found is None or not self.low <= found < self.high:
            raise UnsupportedFrameworkError(
                f"{where} supports {wanted} (the releases it was tested with); {version} is "
                f"installed: pip install '{wanted}' (or 'fxdurable[{self.extra}]')"
            )
        return version


PYDANTIC_AI = Framework("pydantic_ai", "pydantic-ai-slim", "pydantic-ai", (2, 68), (2, 69))
OPENAI_AGENTS = Framework("openai_agents", "openai-agents", "openai-agents", (0, 24), (0, 25))
LANGCHAIN = Framework("langchain", "langchain", "langchain", (1, 5), (1, 6))
