"""fxdurable: LLM-agent turns that outlive their processes.

The public API is re-exported here; ``tests/test_public_api.py`` pins ``__all__``.
"""

from __future__ import annotations

from fxdurable.core.events import EventType
from fxdurable.core.journal import Steering
from fxdurable.core.records import ErrorInfo, EventRecord, ToolCallRequest
from fxdurable.core.states import SubmissionStatus
from fxdurable.errors import (
    AgentBusyError,
    AgentMismatchError,
    ConfigurationError,
    ContextLengthError,
    FxDurableError,
    LeaseLostError,
    ModelError,
    ModelRetryableError,
    RequestConflictError,
    SessionNotFoundError,
    SteeringFullError,
    SubmissionFailedError,
    ToolInputError,
    UnknownAgentError,
)
from fxdurable.runtime.agent import Agent, Durability, ModelRetries, Pricing
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import ScriptedModel, call, reply
from fxdurable.runtime.runtime import Runtime, SessionHandle
from fxdurable.runtime.submission import Submission
from fxdurable.runtime.tools import ReplayPolicy, Tool, ToolContext, define_tool, tool
from fxdurable.runtime.worker import WorkerSettings

__all__ = [
    "Agent",
    "AgentBusyError",
    "AgentMismatchError",
    "ConfigurationError",
    "ContextLengthError",
    "Durability",
    "ErrorInfo",
    "EventRecord",
    "EventType",
    "FxDurableError",
    "LeaseLostError",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetries",
    "ModelRetryableError",
    "Pricing",
    "ReplayPolicy",
    "RequestConflictError",
    "Runtime",
    "ScriptedModel",
    "SessionHandle",
    "SessionNotFoundError",
    "Steering",
    "SteeringFullError",
    "Submission",
    "SubmissionFailedError",
    "SubmissionStatus",
    "Tool",
    "ToolCallRequest",
    "ToolContext",
    "ToolInputError",
    "UnknownAgentError",
    "WorkerSettings",
    "__version__",
    "call",
    "define_tool",
    "reply",
    "tool",
]

__version__ = "0.1.0"
