"""A ``create_agent`` graph run through ``DurableMiddleware`` (``build_graph``), SIGKILLed in a
real process on the embedded SQLite runtime at each crash point of ``pydai_checks.MATRIX``,
then run to rest and checked: the pydantic-ai adapter's crash test itself
(``test_pydantic_ai_crash.kill_and_recover``, the same outside world and ``pydai_checks.py``),
with this file as its driver. After each kill the graph runs again from the turn's start, its
recorded calls answered from the journal: the deploy happened at most once, the model was told
when its outcome is unknown (and its first blind repeat refused), the
idempotent note took effect once under one execution id, ``fxdurable check`` is clean, and
the session completes a follow-up.

``model.mid-stream`` is reached because the graph runs streamed: the chat model's tokens reach
the driver (``_TextForwarder``) while the graph's model call is under way.

Run as a script, this file is the driver process: ``pydai_driver.py``'s run to rest with the
graph in place of the pydantic-ai agent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_pydantic_ai_crash as pydai_crash
from pydai_checks import MATRIX

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[c[0] for c in MATRIX])
def test_a_killed_graph_turn_resumes_from_its_last_recorded_call(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    driver = Path(__file__).resolve()  # this file as a script: the run to rest with its agent
    pydai_crash.kill_and_recover(
        tmp_path, spec, deploys, unknown, driver=driver, framework="langchain"
    )


if __name__ == "__main__":
    import sys

    import pydai_driver
    from test_langchain_middleware import build_graph

    sys.exit(pydai_driver.serve(build_graph))
