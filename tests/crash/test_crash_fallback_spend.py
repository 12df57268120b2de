"""SIGKILL a turn that fell back to its backup model, or that is spending its budget: the
recovery goes on from the journal, not from what the dead process held.

* a fallback: the switch is recorded on the turn, so the recovered turn calls the backup
  first and never the primary again (``spend_driver.py --scenario fallback``);
* a budget: the turn's spending totals are on its record, so the recovery counts what the
  dead attempt spent and stops after the same number of calls as an uninterrupted turn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from crash_harness import assert_clean, assert_crashed, run_process

from fxdurable.backends import open_store

pytestmark = pytest.mark.crash

DRIVER = Path(__file__).resolve().with_name("spend_driver.py")


def run(store_url: str, workdir: Path, scenario: str, crash_at: str | None) -> tuple[int, str, str]:
    argv = [sys.executable, str(DRIVER), "--store", store_url, "--dir", str(workdir)]
    return run_process([*argv, "--scenario", scenario], crash_at=crash_at)


def outcome(stdout: str) -> dict:
    (line,) = [x for x in stdout.splitlines() if x.startswith("outcome ")]
    return json.loads(line.removeprefix("outcome "))


def models_called(workdir: Path) -> list[str]:
    return (workdir / "models.log").read_text().split()


@pytest.mark.parametrize("spec", ["model.after-finish", "tool.after-execute:note"])
def test_a_recovered_turn_goes_on_with_the_model_it_fell_back_to(
    store_url: str, workdir: Path, spec: str
) -> None:
    assert_crashed(run(store_url, workdir, "fallback", spec), spec)
    # The dead attempt: the primary failed, the turn switched, the backup answered round 0.
    assert models_called(workdir) == ["primary", "backup"]
    code, out, err = run(store_url, workdir, "fallback", None)
    assert_clean((code, out, err), "the recovery")
    assert outcome(out)["status"] == "completed" and outcome(out)["text"] == "done"
    recovered = models_called(workdir)[2:]
    assert recovered and set(recovered) == {"backup"}, recovered  # never the primary again

    store = open_store(store_url)
    try:
        events = store.read(lambda v: v.events("s"))
    finally:
        store.close()
    switches = [e for e in events if e.type == "model.fallback"]
    assert [(e.data["from_model"], e.data["to_model"]) for e in switches] == [("primary", "backup")]


def test_a_recovered_turn_counts_what_its_dead_attempt_spent(store_url: str, workdir: Path) -> None:
    spec = "tool.after-execute:note"
    assert_crashed(run(store_url, workdir, "budget", spec), spec)
    assert models_called(workdir) == ["looper"]  # 3 output tokens recorded, then the kill
    code, out, err = run(store_url, workdir, "budget", None)
    assert_clean((code, out, err), "the recovery")
    result = outcome(out)
    assert result["status"] == "failed" and result["error"]["code"] == "budget_exhausted"
    # 3, 6, 9, 12 tokens: four calls in all, as without the crash (a recovery that started
    # counting afresh would make four more).
    assert len(models_called(workdir)) == 4
    assert "used 12 output tokens" in result["error"]["msg"]
