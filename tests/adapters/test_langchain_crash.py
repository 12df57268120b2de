"""A LangChain agent (``test_langchain_agent.build``) SIGKILLed at each crash point of the matrix
(``pydai_checks.MATRIX``: the issue's four and the idempotent note's) in a real process on the
embedded SQLite runtime, then run to rest and checked: the pydantic-ai adapter's crash test
itself (``test_pydantic_ai_crash.kill_and_recover``, over the same outside world and
``pydai_checks.py``), run with this file as its driver. The deploy happened at most once, the
model was told when its outcome is unknown (and its first blind repeat refused), the
idempotent note took effect once under its execution id, ``fxdurable check`` is clean, and the
session completes a follow-up.

Run as a script, this file is the driver process: ``pydai_driver.py``'s run to rest with the
LangChain agent in place of the pydantic-ai one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_pydantic_ai_crash as pydai_crash
from pydai_checks import MATRIX

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[c[0] for c in MATRIX])
def test_a_killed_langchain_turn_resumes_from_its_last_step(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    driver = Path(__file__).resolve()  # this file as a script: the run to rest with its agent
    pydai_crash.kill_and_recover(
        tmp_path, spec, deploys, unknown, driver=driver, framework="langchain"
    )


if __name__ == "__main__":
    import sys

    import pydai_driver
    from test_langchain_agent import build

    sys.exit(pydai_driver.serve(build))
