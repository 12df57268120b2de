"""The outside world's directory of an agent module loaded by a test's worker process."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FXD_TEST_WORLD"


def world_from_env() -> Path:
    """``$FXD_TEST_WORLD``, which every harness sets. Unset, this fails: falling back to the
    working directory wrote a test world's files (an empty ``notes.log``) into the checkout."""
    value = os.environ.get(ENV)
    if not value:
        raise RuntimeError(f"{ENV} is not set: the test agent's world directory is unknown")
    return Path(value)
