"""An OpenAI Agents SDK agent (``test_openai_agents_world.build``) SIGKILLed at each crash point
of the matrix in a real process on the embedded SQLite runtime, then run to rest and checked:
the pydantic-ai adapter's crash test itself (``test_pydantic_ai_crash.py``, over the same outside
world and ``pydai_checks.py``: both worlds write the same logs), run with this file as its
driver. The deploy happened at most once, the model was told its outcome is unknown (and its
first blind repeat refused), the idempotent note took effect once under its one execution id,
``fxdurable check`` is clean, and the session completes a follow-up.

Run as a script, this file is the driver process: ``pydai_driver.py``'s run to rest with the
Agents SDK agent in place of the pydantic-ai one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import test_pydantic_ai_crash as pydai_crash
from pydai_checks import MATRIX, REPO

WORLD = Path(__file__).resolve().with_name("test_openai_agents_world.py")

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[c[0] for c in MATRIX])
def test_a_killed_agents_sdk_turn_resumes_from_its_last_step(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    driver = Path(__file__).resolve()  # this file as a script: the run to rest with its agent
    pydai_crash.kill_and_recover(
        tmp_path, spec, deploys, unknown, driver=driver, framework="openai-agents"
    )


def test_building_the_agent_builds_the_response_types_its_first_step_uses() -> None:
    # A fresh process (openai builds its types' validators at their first use): after the
    # agent is built, before any turn, each Responses type a model step makes is complete, so
    # the first step under a lease does not spend ~0.3 s of CPU on the event loop building
    # them (a lost lease, exit 75, under a 2 s TTL on a loaded machine).
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from openai.types import responses\n"
        "from fxdurable.adapters.openai_agents._model import _RESPONSE_TYPES\n"
        "before = [n for n in _RESPONSE_TYPES if getattr(responses, n).__pydantic_complete__]\n"
        f"sys.path.insert(0, {str(WORLD.parent)!r})\n"
        "import test_openai_agents_world as w\n"
        "w.build(Path('.'))\n"
        "after = [n for n in _RESPONSE_TYPES if getattr(responses, n).__pydantic_complete__]\n"
        "print(json.dumps([before, after, list(_RESPONSE_TYPES)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, after, names = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Response" not in before and "ResponseTextDeltaEvent" not in before, before
    assert after == names


if __name__ == "__main__":
    import pydai_driver
    from test_openai_agents_world import build

    sys.exit(pydai_driver.serve(build))
