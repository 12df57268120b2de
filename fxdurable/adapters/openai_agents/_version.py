"""The OpenAI Agents SDK releases this adapter was tested with, checked before ``agents`` loads.

The adapter reads the SDK's public API (``Agent``'s fields, ``FunctionTool``, the ``Model``
interface, ``ToolContext`` and the Responses item types); the SDK is pre-1.0 and changes those
between minor releases, so a release outside the tested range fails here, with one message
naming what is installed and what to install, not with an ``AttributeError`` inside a turn.
"""

from __future__ import annotations

import re
from importlib import metadata

from fxdurable.errors import ConfigurationError

__all__ = ["DISTRIBUTION", "RANGE", "SUPPORTED", "UnsupportedFrameworkError", "check_version"]

DISTRIBUTION = "openai-agents"
# [lowest, highest): the releases tests/adapters/test_openai_agents*.py ran on; the extra in
# pyproject.toml pins the same range.
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((0, 24), (0, 25))
RANGE = ">=0.24,<0.25"


class UnsupportedFrameworkError(ConfigurationError):
    """The OpenAI Agents SDK is missing or outside the range the adapter was tested with."""


def check_version(version: str | None = None) -> str:
    """Return the installed openai-agents version (or ``version``, when given), or raise
    :class:`UnsupportedFrameworkError` naming it and the supported range."""
    if version is None:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            raise UnsupportedFrameworkError(
                f"fxdurable.adapters.openai_agents needs {DISTRIBUTION}{RANGE}, which is not "
                "installed: pip install 'fxdurable[openai-agents]'"
            ) from None
    parsed = re.match(r"(\d+)\.(\d+)", version)
    found = (int(parsed.group(1)), int(parsed.group(2))) if parsed else None
    if found is None or not SUPPORTED[0] <= found < SUPPORTED[1]:
        raise UnsupportedFrameworkError(
            f"fxdurable.adapters.openai_agents supports {DISTRIBUTION}{RANGE} (the releases "
            f"it was tested with); {version} is installed: pip install "
            f"'{DISTRIBUTION}{RANGE}' (or 'fxdurable[openai-agents]')"
        )
    return version
