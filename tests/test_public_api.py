"""Pins the public API: a name added to or dropped from ``fxdurable.__all__`` is a decision."""

from __future__ import annotations

import importlib

import fxdurable

PUBLIC_API = [
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


def test_all_is_exactly_the_pinned_list():
    assert sorted(PUBLIC_API) == PUBLIC_API
    assert fxdurable.__all__ == PUBLIC_API


def test_every_public_name_is_importable():
    namespace: dict[str, object] = {}
    exec("from fxdurable import *", namespace)
    for name in PUBLIC_API:
        assert name in namespace, name
        assert namespace[name] is getattr(importlib.import_module("fxdurable"), name)


def test_errors_share_one_root():
    for name in PUBLIC_API:
        value = getattr(fxdurable, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, fxdurable.FxDurableError), name
    assert issubclass(fxdurable.UnknownAgentError, fxdurable.ConfigurationError)


def test_version_is_a_string():
    assert isinstance(fxdurable.__version__, str) and fxdurable.__version__
