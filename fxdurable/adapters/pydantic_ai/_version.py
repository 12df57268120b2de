"""The pydantic-ai releases this adapter was tested with, checked before pydantic-ai is imported.

The adapter reads pydantic-ai's public API (its model classes, toolsets, ``RunContext`` and
message parts); a release outside the tested range may have moved any of them, and fails here
with one message that says what is installed and what to install, instead of an
``AttributeError`` deep in a turn.
"""

from __future__ import annotations

import re
from importlib import metadata

from fxdurable.errors import ConfigurationError

__all__ = ["DISTRIBUTION", "SUPPORTED", "UnsupportedFrameworkError", "check_version"]

DISTRIBUTION = "pydantic-ai-slim"
# [lowest, highest): the releases the adapter's tests ran on (tests/adapters/); the extra in
# pyproject.toml pins the same range.
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((2, 68), (2, 69))
RANGE = ">=2.68,<2.69"


class UnsupportedFrameworkError(ConfigurationError):
    """The installed framework is missing or outside the range the adapter was tested with."""


def check_version(version: str | None = None) -> str:
    """Return the installed pydantic-ai-slim version (or ``version``, when given), or raise
    :class:`UnsupportedFrameworkError` naming it and the supported range."""
    if version is None:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            raise UnsupportedFrameworkError(
                f"fxdurable.adapters.pydantic_ai needs {DISTRIBUTION}{RANGE}, which is not "
                "installed: pip install 'fxdurable[pydantic-ai]'"
            ) from None
    match = re.match(r"(\d+)\.(\d+)", version)
    found = (int(match.group(1)), int(match.group(2))) if match else None
    low, high = SUPPORTED
    if found is None or not low <= found < high:
        raise UnsupportedFrameworkError(
            f"fxdurable.adapters.pydantic_ai supports {DISTRIBUTION}{RANGE} (the releases it "
            f"was tested with); {version} is installed: pip install "
            f"'{DISTRIBUTION}{RANGE}' (or 'fxdurable[pydantic-ai]')"
        )
    return version
