"""The LangChain releases this adapter was tested with, checked before LangChain is imported.

The adapter reads LangChain's public API (``BaseChatModel.bind_tools`` and ``astream``, the
message classes, ``BaseTool`` and its tool-call input, ``init_chat_model``); a release outside
the tested range may have moved any of them, and fails here with one message that says what is
installed and what to install, instead of an ``AttributeError`` deep in a turn.
"""

from __future__ import annotations

import re
from importlib import metadata

from fxdurable.errors import ConfigurationError

__all__ = ["DISTRIBUTION", "SUPPORTED", "UnsupportedFrameworkError", "check_version"]

DISTRIBUTION = "langchain"
# [lowest, highest): the releases the adapter's tests ran on (tests/adapters/test_langchain*);
# the extra in pyproject.toml pins the same range.
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((1, 5), (1, 6))
RANGE = ">=1.5,<1.6"


class UnsupportedFrameworkError(ConfigurationError):
    """The installed LangChain is missing or outside the range the adapter was tested with."""


def check_version(version: str | None = None) -> str:
    """Return the installed ``langchain`` version (or ``version``, when given), or raise
    :class:`UnsupportedFrameworkError` naming it and the supported range."""
    if version is None:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            raise UnsupportedFrameworkError(
                f"fxdurable.adapters.langchain needs {DISTRIBUTION}{RANGE}, which is not "
                "installed: pip install 'fxdurable[langchain]'"
            ) from None
    match = re.match(r"(\d+)\.(\d+)", version)
    found = (int(match.group(1)), int(match.group(2))) if match else None
    low, high = SUPPORTED
    if found is None or not low <= found < high:
        raise UnsupportedFrameworkError(
            f"fxdurable.adapters.langchain supports {DISTRIBUTION}{RANGE} (the releases it "
            f"was tested with); {version} is installed: pip install "
            f"'{DISTRIBUTION}{RANGE}' (or 'fxdurable[langchain]')"
        )
    return version
