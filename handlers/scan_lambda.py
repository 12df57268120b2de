"""The scan function on AWS Lambda, on an EventBridge schedule: ``handler``.

Wakes every session with unsettled work and no live lease. Configured by ``FXD_STORE``,
``FXD_QUEUE`` and ``FXD_SCAN_QUIET_S``; see :mod:`fxdurable.aws_lambda.scan`.
"""

from fxdurable.aws_lambda.scan import handler

__all__ = ["handler"]
