"""fxdurable for OpenAI Agents SDK agents (``pip install 'fxdurable[openai-agents]'``).

``durable_agent(sdk_agent, ...)`` returns an :class:`fxdurable.Agent` for a
:class:`fxdurable.Runtime` or a worker: each model request and each function tool call of the
SDK agent is then a journaled step of fxdurable's own turn loop (docs/frameworks/openai-agents.md
says exactly what is and is not durable); ``DurableSession(rt.session(id))`` is a durable
session's conversation as an SDK ``Session`` (read-only), and ``StoreSession(rt, id)`` a
writable SDK ``Session`` kept in the store for the SDK's own ``Runner``. Importing this module
checks the installed openai-agents against the range it was tested with first
(:class:`UnsupportedFrameworkError`).
"""

from __future__ import annotations

from fxdurable.adapters._version import OPENAI_AGENTS, UnsupportedFrameworkError

SUPPORTED = OPENAI_AGENTS.supported
check_version = OPENAI_AGENTS.check
check_version()

from fxdurable.adapters.openai_agents._agent import (  # noqa: E402  (after the version check)
    REPLAY_ATTRIBUTE,
    FrameworkTool,
    durable_agent,
    replay,
    tool_context,
)
from fxdurable.adapters.openai_agents._model import FrameworkModel  # noqa: E402
from fxdurable.adapters.openai_agents._session import (  # noqa: E402
    DurableSession,
    SessionReadOnlyError,
    StoreSession,
)

__all__ = [
    "REPLAY_ATTRIBUTE",
    "SUPPORTED",
    "DurableSession",
    "FrameworkModel",
    "FrameworkTool",
    "SessionReadOnlyError",
    "StoreSession",
    "UnsupportedFrameworkError",
    "check_version",
    "durable_agent",
    "replay",
    "tool_context",
]
