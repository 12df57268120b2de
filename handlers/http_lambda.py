"""The HTTP API on AWS Lambda, behind API Gateway (HTTP API, payload v2): ``handler``.

Receipt mode: ``POST /chat`` answers 202 with a cursor, ``GET /chat`` long-polls. Configured
by ``FXD_AGENTS``, ``FXD_STORE``, ``FXD_QUEUE`` (the SQS queue), ``FXD_HTTP_TOKENS`` (or
``FXD_SECRETS_SSM_PATH`` naming where SSM keeps it) and ``FXD_HTTP_LONG_POLL_S``; see
:mod:`fxdurable.aws_lambda.http`. Importing this module loads only what the HTTP function
needs; the app itself is built at the first request.
"""

from fxdurable.aws_lambda.http import handler

__all__ = ["handler"]
