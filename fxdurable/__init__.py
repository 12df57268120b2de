"""fxdurable: LLM-agent turns that outlive their processes.

The public API is re-exported here; ``tests/test_public_api.py`` pins ``__all__``. Every name
is imported on first use (:mod:`fxdurable.core.lazy`), so ``import fxdurable`` loads none of
the runtime, and reading ``fxdurable.Runtime`` loads no model provider, HTTP stack, Redis,
RQ or AWS client: those load when a URL, a model or a command asks for them
(``tests/test_lazy_imports.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fxdurable.core.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; the table below is what runs
    from fxdurable.core.events import EventType
    from fxdurable.core.journal import Fork, Steering
    from fxdurable.core.records import ErrorInfo, EventRecord, ToolCallRequest
    from fxdurable.core.states import SubmissionStatus
    from fxdurable.errors import (
        AgentBusyError,
        AgentMismatchError,
        AnswerError,
        AttachmentError,
        ConfigurationError,
        ContextLengthError,
        EditError,
        ForkPointError,
        FxDurableError,
        InvalidAnswerError,
        LeaseLostError,
        ModelError,
        ModelOverloadedError,
        ModelRetryableError,
        NoPendingQuestionError,
        PathRefusedError,
        RecordedStepError,
        RequestConflictError,
        SessionExistsError,
        SessionNotFoundError,
        StateError,
        StateTooLargeError,
        SteeringFullError,
        StepError,
        SubagentError,
        SubmissionFailedError,
        ToolInputError,
        UnknownAgentError,
        WebhookSignatureError,
        WorkspaceError,
    )
    from fxdurable.runtime.agent import Agent, Durability, ModelRetries, Pricing
    from fxdurable.runtime.answers import Question
    from fxdurable.runtime.attachments import ToolResult
    from fxdurable.runtime.hooks import Answer, Ask, ToolCall, allow, ask, deny, rewrite
    from fxdurable.runtime.models.base import Attachment, ModelRequest, ModelResponse
    from fxdurable.runtime.models.fallback import Fallback
    from fxdurable.runtime.models.scripted import ScriptedModel, call, reply
    from fxdurable.runtime.runtime import Runtime, SessionHandle
    from fxdurable.runtime.spend import SpendingBudget
    from fxdurable.runtime.subagent import subagent
    from fxdurable.runtime.submission import Submission
    from fxdurable.runtime.task_view import ToolTask
    from fxdurable.runtime.tool_retry import Retry
    from fxdurable.runtime.tools import ReplayPolicy, Tool, ToolContext, define_tool, tool
    from fxdurable.runtime.webhooks import Webhook, verify_webhook
    from fxdurable.runtime.worker import WorkerSettings
    from fxdurable.tools.mcp import MCPServer, mcp_tools

__all__ = [
    "Agent",
    "AgentBusyError",
    "AgentMismatchError",
    "Answer",
    "AnswerError",
    "Ask",
    "Attachment",
    "AttachmentError",
    "ConfigurationError",
    "ContextLengthError",
    "Durability",
    "EditError",
    "ErrorInfo",
    "EventRecord",
    "EventType",
    "Fallback",
    "Fork",
    "ForkPointError",
    "FxDurableError",
    "InvalidAnswerError",
    "LeaseLostError",
    "MCPServer",
    "ModelError",
    "ModelOverloadedError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetries",
    "ModelRetryableError",
    "NoPendingQuestionError",
    "PathRefusedError",
    "Pricing",
    "Question",
    "RecordedStepError",
    "ReplayPolicy",
    "RequestConflictError",
    "Retry",
    "Runtime",
    "ScriptedModel",
    "SessionExistsError",
    "SessionHandle",
    "SessionNotFoundError",
    "SpendingBudget",
    "StateError",
    "StateTooLargeError",
    "Steering",
    "SteeringFullError",
    "StepError",
    "SubagentError",
    "Submission",
    "SubmissionFailedError",
    "SubmissionStatus",
    "Tool",
    "ToolCall",
    "ToolCallRequest",
    "ToolContext",
    "ToolInputError",
    "ToolResult",
    "ToolTask",
    "UnknownAgentError",
    "Webhook",
    "WebhookSignatureError",
    "WorkerSettings",
    "WorkspaceError",
    "__version__",
    "allow",
    "ask",
    "call",
    "define_tool",
    "deny",
    "mcp_tools",
    "reply",
    "rewrite",
    "subagent",
    "tool",
    "verify_webhook",
]


__version__ = "0.1.0"

# Hidden from type checkers, which read the imports above instead: a misspelt name stays an
# error there rather than an ``object`` from ``__getattr__``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "fxdurable.core.events": ("EventType",),
            "fxdurable.core.journal": ("Fork", "Steering"),
            "fxdurable.core.records": ("ErrorInfo", "EventRecord", "ToolCallRequest"),
            "fxdurable.core.states": ("SubmissionStatus",),
            "fxdurable.errors": (
                "AgentBusyError",
                "AgentMismatchError",
                "AnswerError",
                "AttachmentError",
                "ConfigurationError",
                "ContextLengthError",
                "EditError",
                "ForkPointError",
                "FxDurableError",
                "InvalidAnswerError",
                "LeaseLostError",
                "ModelError",
                "ModelOverloadedError",
                "ModelRetryableError",
                "NoPendingQuestionError",
                "PathRefusedError",
                "RecordedStepError",
                "RequestConflictError",
                "SessionExistsError",
                "SessionNotFoundError",
                "StateError",
                "StateTooLargeError",
                "SteeringFullError",
                "StepError",
                "SubagentError",
                "SubmissionFailedError",
                "ToolInputError",
                "UnknownAgentError",
                "WebhookSignatureError",
                "WorkspaceError",
            ),
            "fxdurable.runtime.agent": ("Agent", "Durability", "ModelRetries", "Pricing"),
            "fxdurable.runtime.answers": ("Question",),
            "fxdurable.runtime.attachments": ("ToolResult",),
            "fxdurable.runtime.hooks": (
                "Answer",
                "Ask",
                "ToolCall",
                "allow",
                "ask",
                "deny",
                "rewrite",
            ),
            "fxdurable.runtime.models.base": ("Attachment", "ModelRequest", "ModelResponse"),
            "fxdurable.runtime.models.fallback": ("Fallback",),
            "fxdurable.runtime.models.scripted": ("ScriptedModel", "call", "reply"),
            "fxdurable.runtime.runtime": ("Runtime", "SessionHandle"),
            "fxdurable.runtime.spend": ("SpendingBudget",),
            "fxdurable.runtime.subagent": ("subagent",),
            "fxdurable.runtime.submission": ("Submission",),
            "fxdurable.runtime.task_view": ("ToolTask",),
            "fxdurable.runtime.tool_retry": ("Retry",),
            "fxdurable.runtime.tools": (
                "ReplayPolicy",
                "Tool",
                "ToolContext",
                "define_tool",
                "tool",
            ),
            "fxdurable.runtime.webhooks": ("Webhook", "verify_webhook"),
            "fxdurable.runtime.worker": ("WorkerSettings",),
            "fxdurable.tools.mcp": ("MCPServer", "mcp_tools"),
        },
    )
