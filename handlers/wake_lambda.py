"""The wake function on AWS Lambda, subscribed to the SQS queue: ``handler``.

Runs each woken session until it rests or the invocation's remaining time minus
``FXD_LAMBDA_MARGIN_S`` runs out, enqueues the continuation, and reports failed records as
``batchItemFailures``. Configured by ``FXD_AGENTS``, ``FXD_STORE``, ``FXD_QUEUE``,
``FXD_LAMBDA_MARGIN_S`` and ``FXD_SECRETS_SSM_PATH`` (the model keys); see
:mod:`fxdurable.aws_lambda.wake`.
"""

from fxdurable.aws_lambda.wake import handler

__all__ = ["handler"]
