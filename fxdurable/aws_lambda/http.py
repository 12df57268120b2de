"""The HTTP function: the ASGI app behind API Gateway (HTTP API, payload format 2.0).

A Python Lambda cannot stream its answer through API Gateway, so the app runs in *receipt*
mode (:class:`~fxdurable.http.HttpSettings`): ``POST /chat`` admits the prompt, enqueues a
wake on SQS and answers 202 with ``sessionId``, ``submissionId`` and ``cursor``;
``GET /chat?sessionId=&cursor=`` long-polls (``FXD_HTTP_LONG_POLL_S``, 20 s by default, at
most 28 s: API Gateway cuts integrations off at 30 s) and answers the JSON lines after the
cursor. Authentication, ownership (404 for another caller's session) and every other route
are the server's own. This function never runs a turn: the wake function does.

Mangum translates API Gateway's events to ASGI and back (the v1 and v2 payloads, base64
bodies, multi-value headers and cookies); it is small, typed and kept up to date. Two things
are set here rather than left to it: its lifespan is off, because Mangum would run the app's
startup and shutdown around *every* invocation (closing the store each time), and the event
loop is ours, made current once and kept, so the store's thread pool and the SQS client live
as long as the sandbox. The HTTP tokens come from ``FXD_HTTP_TOKENS``, which
``FXD_SECRETS_SSM_PATH`` can load from SSM at a cold start
(:mod:`fxdurable.aws_lambda.secrets`). Cold start, measured on the development machine
(``python -m bench.lambda_cold_start``, median of 7): importing ``handlers.http_lambda``
158 ms, and with the first invocation's build (store, SQS client, agents, app) 289 ms.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from typing import Any, cast

from mangum import Mangum

from fxdurable.aws_lambda.config import app_dir, require_remote_queue
from fxdurable.aws_lambda.sandbox import LambdaContext, warm_handler
from fxdurable.aws_lambda.secrets import secrets_from_env
from fxdurable.errors import ConfigurationError
from fxdurable.http.env import app_from_env
from fxdurable.http.settings import HttpSettings

__all__ = ["HttpFunction", "handler"]


class HttpFunction:
    """One sandbox's app, event loop and Mangum adapter."""

    def __init__(self) -> None:
        queue_url = os.environ.get("FXD_QUEUE")
        if not queue_url:
            raise ConfigurationError("the HTTP function needs FXD_QUEUE (the SQS queue's URL)")
        require_remote_queue(queue_url)
        self.loop = asyncio.new_event_loop()
        # Mangum runs each request on the current event loop: make ours current, for good.
        asyncio.set_event_loop(self.loop)
        settings = dataclasses.replace(HttpSettings.from_env(), mode="receipt")
        self.app = app_from_env(settings=settings, app_dir=app_dir())
        self.adapter = Mangum(self.app, lifespan="off")

    @classmethod
    def from_env(cls) -> HttpFunction:
        secrets_from_env()
        return cls()

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        # Mangum's own context type lists every attribute Lambda's has; it only passes it on
        # (as the ASGI scope's "aws.context").
        answer: dict[str, Any] = self.adapter(dict(event), cast(Any, context))
        return answer

    def close(self) -> None:
        """Close the runtime (its queue client and store) and the loop (tests; a sandbox is
        discarded by Lambda instead)."""
        runtime = self.app.state.runtime
        self.loop.run_until_complete(runtime.aclose())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
        asyncio.set_event_loop(None)


#: The Lambda entry point (``handlers/*_lambda.handler``).
handler = warm_handler(HttpFunction.from_env)
