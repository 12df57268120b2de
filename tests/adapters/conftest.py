"""The pydantic-ai adapter's tests (pydantic-ai-slim is in the test extra: they never skip)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the tests import pydai_agent beside them
    sys.path.insert(0, HERE)
