"""An OpenAI Agents SDK agent SIGKILLed around its unsafe deploy, in a real process on the
embedded SQLite runtime (``test_openai_agents_world.py`` as a script), then run to rest and
checked with the pydantic-ai adapter's checks (``pydai_checks.py``: both worlds write the same
logs): the deploy happened at most once, the model was told its outcome is unknown and its
first blind repeat was refused, the idempotent note took effect once under its one execution
id, and ``fxdurable check`` is clean. The two points where the unknown outcome arises, and a
kill inside the SDK model's stream (the answer is asked for again; nothing re-runs); the rest
of the matrix is the same turn loop, covered by the pydantic-ai crash tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydai_checks import MATRIX, REPO, assert_checked, assert_recovered, lines

WORLD = Path(__file__).resolve().with_name("test_openai_agents_world.py")
POINTS = [m for m in MATRIX if m[0].endswith(":deploy") or m[0] == "model.mid-stream"]

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def drive(store: str, world: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(WORLD), store, str(world)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.parametrize(("spec", "deploys", "unknown"), POINTS, ids=[p[0] for p in POINTS])
def test_a_killed_agents_sdk_turn_resumes_and_never_repeats_the_deploy(
    tmp_path: Path, spec: str, deploys: int, unknown: bool
) -> None:
    store, world = f"sqlite:///{tmp_path}/oai.db", tmp_path / "world"
    world.mkdir()
    crashed = drive(store, world, spec)
    assert crashed.returncode == -signal.SIGKILL, (crashed.stdout, crashed.stderr)
    assert f"crash injected at {spec}" in crashed.stderr, crashed.stderr
    crashed_pid = json.loads(lines(world / "model.log")[-1])["pid"]

    recovered = drive(store, world)
    assert recovered.returncode == 0 and "Traceback" not in recovered.stderr, recovered.stderr
    (line,) = [x for x in recovered.stdout.splitlines() if x.startswith("outcome ")]
    done = json.loads(line.removeprefix("outcome "))
    assert done["status"] == "completed", done
    assert_recovered(
        world, spec, deploys=deploys, unknown=unknown, text=done["text"], crashed_pid=crashed_pid
    )
    assert_checked(store, world)


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
