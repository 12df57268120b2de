"""fxdurable for pydantic-ai agents (``pip install 'fxdurable[pydantic-ai]'``).

``durable_agent(pydantic_ai_agent, ...)`` returns an :class:`fxdurable.Agent` for a
:class:`fxdurable.Runtime` or a worker: each model request and each tool call of the
pydantic-ai agent is then a journaled step (docs/frameworks/pydantic-ai.md says exactly what is
and is not durable). Importing this module checks the installed pydantic-ai-slim against the
range it was tested with first (:class:`UnsupportedFrameworkError` otherwise).
"""

from __future__ import annotations

from fxdurable.adapters._version import PYDANTIC_AI, UnsupportedFrameworkError

SUPPORTED = PYDANTIC_AI.supported
check_version = PYDANTIC_AI.check
check_version()

from fxdurable.adapters.pydantic_ai._agent import (  # noqa: E402  (after the version check)
    REPLAY_KEY,
    FrameworkTool,
    durable_agent,
    replay,
    tool_context,
)
from fxdurable.adapters.pydantic_ai._external import (  # noqa: E402
    ExternalTool,
    tool_result,
)
from fxdurable.adapters.pydantic_ai._model import FrameworkModel  # noqa: E402

__all__ = [
    "REPLAY_KEY",
    "SUPPORTED",
    "ExternalTool",
    "FrameworkModel",
    "FrameworkTool",
    "UnsupportedFrameworkError",
    "check_version",
    "durable_agent",
    "replay",
    "tool_context",
    "tool_result",
]
