"""The Lambda functions' configuration, from the environment the SAM template sets.

``FXD_STORE`` and ``FXD_QUEUE`` (required: the functions share nothing but them),
``FXD_LAMBDA_MARGIN_S`` (the wake function: the time kept
in hand at every step boundary) and ``FXD_SECRETS_SSM_PATH`` (every function: SSM parameters
to load into the environment at a cold start, see :mod:`fxdurable.aws_lambda.secrets`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError

__all__ = ["DEFAULT_MARGIN_S", "LambdaConfig", "app_dir", "require_remote_queue"]

# A step that starts with less than this left could be cut off by the function's timeout:
# the longest model call or tool the agents make, plus a few seconds to commit, enqueue the
# continuation and let the lease go. A minute covers a long model call; raise it for longer
# tools (and the function's timeout with it).
DEFAULT_MARGIN_S = 60.0


def app_dir() -> str | None:
    """Where the user's agents module is imported from: ``$FXD_APP_DIR``, else the function's
    code directory (``$LAMBDA_TASK_ROOT``, /var/task). Lambda's Python runtime has that
    directory on ``sys.path`` already; naming it makes the import not depend on that, nor on
    the process's working directory. None (the loader reads ``$FXD_APP_DIR``, else the
    current directory) when ``FXD_APP_DIR`` is set, or outside Lambda."""
    if os.environ.get("FXD_APP_DIR"):
        return None
    return os.environ.get("LAMBDA_TASK_ROOT") or None


@dataclass(frozen=True, slots=True, kw_only=True)
class LambdaConfig:
    store_url: str
    queue_url: str
    margin_s: float = DEFAULT_MARGIN_S

    @classmethod
    def from_env(cls) -> LambdaConfig:
        env = os.environ
        missing = [name for name in ("FXD_STORE", "FXD_QUEUE") if not env.get(name)]
        if missing:
            raise ConfigurationError(
                f"this Lambda function needs {', '.join(missing)} in its environment "
                "(infra/template.yaml sets them)"
            )
        raw_margin = env.get("FXD_LAMBDA_MARGIN_S") or str(DEFAULT_MARGIN_S)
        try:
            margin_s = float(raw_margin)
        except ValueError:
            raise ConfigurationError(
                f"FXD_LAMBDA_MARGIN_S must be a number of seconds, not {raw_margin!r}"
            ) from None
        if margin_s <= 0:
            raise ConfigurationError("FXD_LAMBDA_MARGIN_S must be positive")
        queue_url = env["FXD_QUEUE"]
        require_remote_queue(queue_url)
        return cls(
            store_url=env["FXD_STORE"],
            queue_url=queue_url,
            margin_s=margin_s,
        )


def require_remote_queue(url: str) -> None:
    """An in-process queue in a Lambda would lose every wake when the invocation ends."""
    if url == "local":
        raise ConfigurationError(
            "FXD_QUEUE=local cannot work on Lambda: wakes must outlive the invocation; "
            "use the SQS queue (sqs://NAME_OR_URL)"
        )
