"""Secrets from SSM Parameter Store, loaded into the environment at a cold start.

The template never holds a secret, and neither does a function's configuration (which the
console and ``GetFunctionConfiguration`` show): it sets ``FXD_SECRETS_SSM_PATH`` to a path
such as ``/fxdurable/prod/model``, and every parameter directly under it (SecureString or
String) becomes the environment variable of its last path segment, e.g.
``/fxdurable/prod/model/OPENAI_API_KEY`` → ``OPENAI_API_KEY``, read by the model clients as
usual, and ``/fxdurable/prod/http/FXD_HTTP_TOKENS`` → the HTTP API's tokens. One
``GetParametersByPath`` call per page of ten. Logs name the variables set, never a value.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import MutableMapping
from typing import Any

from fxdurable.errors import ConfigurationError

__all__ = ["load_ssm_secrets", "secrets_from_env"]

log = logging.getLogger("fxdurable.lambda")

_VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]*")


def secrets_from_env(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Load the parameters under ``FXD_SECRETS_SSM_PATH`` (if set) into ``environ``."""
    path = environ.get("FXD_SECRETS_SSM_PATH")
    return load_ssm_secrets(path, environ) if path else []


def load_ssm_secrets(
    path: str, environ: MutableMapping[str, str], *, session: Any = None
) -> list[str]:
    """Set ``environ[NAME]`` for every parameter ``{path}/NAME``; returns the names set."""
    import boto3
    from botocore import exceptions as bx

    prefix = path.rstrip("/")
    found: dict[str, str] = {}
    try:
        client = (session or boto3).client("ssm")
        pages = client.get_paginator("get_parameters_by_path").paginate(
            Path=prefix or "/", WithDecryption=True, Recursive=False
        )
        for page in pages:
            for parameter in page.get("Parameters", []):
                found[str(parameter["Name"]).rsplit("/", 1)[-1]] = str(parameter["Value"])
    except (bx.BotoCoreError, bx.ClientError) as exc:
        code = exc.response.get("Error", {}).get("Code") if isinstance(exc, bx.ClientError) else ""
        raise ConfigurationError(
            f"cannot read the secrets under SSM path {prefix!r} ({code or type(exc).__name__}); "
            "check that the function's role may ssm:GetParametersByPath on it"
        ) from None
    bad = sorted(name for name in found if not _VARIABLE.fullmatch(name))
    if bad:
        raise ConfigurationError(
            f"SSM parameters under {prefix!r} must be named like environment variables "
            f"(A-Z, 0-9, _): {bad}"
        )
    environ.update(found)
    log.info("loaded %s from SSM path %s", ", ".join(sorted(found)) or "nothing", prefix)
    return sorted(found)
