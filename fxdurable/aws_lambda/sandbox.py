"""A Lambda sandbox as the functions see it: the context's remaining time, a worker identity
of its own, and an entry point that keeps its function warm from one invocation to the next."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from fxdurable.core.journal import WorkerIdentity

__all__ = ["LambdaContext", "remaining_s", "sandbox_identity", "warm_handler"]

R = TypeVar("R")
Function = Callable[[Mapping[str, Any], "LambdaContext"], R]


class LambdaContext(Protocol):
    """The part of ``context`` the functions use (a fake with this method will do in tests)."""

    def get_remaining_time_in_millis(self) -> int: ...


def remaining_s(context: LambdaContext) -> float:
    return context.get_remaining_time_in_millis() / 1000.0


def sandbox_identity() -> WorkerIdentity:
    """A lease holder's name no other process can have.

    Host names and pids repeat across Lambda sandboxes (the runtime is often the same pid in
    each), so the worker's usual ``(hostname, pid)`` could let one sandbox judge another's live
    lease "held by a dead process on this host" and take it over. With a host that is unique
    to this sandbox, a lease is only ever taken over once it expires.
    """
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "lambda"
    return WorkerIdentity(host=f"lambda/{function}/{uuid.uuid4().hex[:12]}", pid=os.getpid())


def warm_handler(build: Callable[[], Function[R]]) -> Function[R]:
    """A Lambda entry point that builds its function (store, queue client, event loop, app)
    at the first invocation and keeps it for every later one in the same sandbox. Built
    there rather than at import, so that a configuration error fails the invocation with its
    message instead of the sandbox's init."""
    built: list[Function[R]] = []

    def handler(event: Mapping[str, Any], context: LambdaContext) -> R:
        if not built:
            built.append(build())
        return built[0](event, context)

    return handler
