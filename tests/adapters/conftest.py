"""The framework adapters' tests (the frameworks are in the test extra: they never skip)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The tests import the worlds beside them (pydai_agent, ...), and the example-project tests
# here the helpers of tests/examples (examples_support, test_framework_projects).
for where in (str(HERE), str(HERE.parent / "examples")):
    if where not in sys.path:
        sys.path.insert(0, where)
