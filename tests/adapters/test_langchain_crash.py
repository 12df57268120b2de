"""A LangChain agent (``test_langchain_agent.build``) SIGKILLed at the issue's four crash points
in a real process on the embedded SQLite runtime, then run to rest and checked: the
pydantic-ai adapter's crash test itself (``test_pydantic_ai_crash.py``, over the same outside
world and ``pydai_checks.py``), run with this file as its driver. The deploy happened at most
once, the model was told its outcome is unknown (and its first blind repeat refused), the
idempotent note took effect once under its execution id, ``fxdurable check`` is clean, and the
session completes a follow-up.

Run as a script, this file is the driver process: ``pydai_driver.py``'s run to rest with the
LangChain agent in place of the pydantic-ai one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_pydantic_ai_crash as pydai_crash
from pydai_checks import MATRIX, lines

pytestmark = [pytest.mark.crash, pytest.mark.slow]

# The four crash points (the idempotent note's key is checked in process,
# test_langchain_agent.py): an unsafe call's intent recorded, its effect done but not its
# result, a kill inside the model's stream, and one inside the answer's commit. Each case is
# 5 processes.
CASES = [m for m in MATRIX if not m[0].endswith(":record_note")]


@pytest.mark.parametrize(("spec", "deploys", "unknown"), CASES, ids=[c[0] for c in CASES])
def test_a_killed_langchain_turn_resumes_from_its_last_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, deploys: int, unknown: bool
) -> None:
    # The pydantic-ai adapter's crash test, whole (kill, recover, check, follow up), with
    # this file as its driver process: the same run to rest, with the LangChain agent.
    monkeypatch.setattr(pydai_crash, "DRIVER", Path(__file__).resolve())
    pydai_crash.test_a_killed_pydantic_ai_turn_resumes_from_its_last_step(
        tmp_path, spec, deploys, unknown
    )
    served = [json.loads(x) for x in lines(tmp_path / "world" / "model.log")]
    assert served and {r.get("framework") for r in served} == {"langchain"}, served


if __name__ == "__main__":
    import argparse
    import asyncio
    import sys

    import pydai_driver
    from test_langchain_agent import build

    pydai_driver.build = build  # the driver's run to rest, with the LangChain agent
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--next", action="store_true")
    sys.exit(asyncio.run(pydai_driver.main(parser.parse_args())))
