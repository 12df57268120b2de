"""fxdurable for LangChain agents (``pip install 'fxdurable[langchain]'``).

``durable_agent(model, tools, name=..., system_prompt=...)`` takes what
``langchain.agents.create_agent`` takes and returns an :class:`fxdurable.Agent` for a
:class:`fxdurable.Runtime` or a worker: each chat-model call and each tool call is then a
journaled step of fxdurable's own turn loop (docs/frameworks/langchain.md says exactly what is
and is not durable). Importing this module checks the installed ``langchain`` against the
range it was tested with first (:class:`UnsupportedFrameworkError` otherwise).

``DurableMiddleware`` is the other form: the user's own ``create_agent(model, tools,
middleware=[durable, ...])`` graph runs as each turn, its model and tool calls journaled and
replayed by position (``durable.agent(graph, name=...)`` is its fxdurable Agent).
"""

from __future__ import annotations

from fxdurable.adapters._version import LANGCHAIN, UnsupportedFrameworkError

SUPPORTED = LANGCHAIN.supported
check_version = LANGCHAIN.check
check_version()

from fxdurable.adapters._driven import ReplayMismatchError  # noqa: E402
from fxdurable.adapters.langchain._agent import (  # noqa: E402  (after the version check)
    REPLAY_KEY,
    LangChainTool,
    durable_agent,
    tool_context,
    with_replay,
)
from fxdurable.adapters.langchain._middleware import DurableMiddleware  # noqa: E402
from fxdurable.adapters.langchain._model import ChatModel  # noqa: E402

__all__ = [
    "REPLAY_KEY",
    "SUPPORTED",
    "ChatModel",
    "DurableMiddleware",
    "LangChainTool",
    "ReplayMismatchError",
    "UnsupportedFrameworkError",
    "check_version",
    "durable_agent",
    "tool_context",
    "with_replay",
]
