"""SIGKILL around the two steps a model call can leave without asking for a tool: a typed
answer's rejection, and a paused turn (``tests/crash/answers_driver.py`` runs the process).

- typed, killed at ``model.after-finish`` (the invalid answer streamed, nothing recorded) and
  at ``output.after-reject`` (the rejection committed, the model not asked again): recovery
  reaches the same verdict or reads the recorded one, rejects once in all, asks again once,
  and the submission completes with the validated output;
- paused, killed at ``model.after-pause`` (the paused response committed, its continuation not
  asked for): recovery does not ask for the paused response again; its continuation, from a
  fresh server that holds no state, carries the paused content and the container, and the
  answer is the paused text and the continuation's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from answers_driver import CONTINUED_TEXT, PAUSED_TEXT, PROMPT, REQUEST, SESSION
from crash_harness import assert_clean, assert_crashed, run_process

from fxdurable.runtime.models.base import REJECTED_ANSWER_HEADING
from tests.kit.world import assert_invariants, read_store, read_world

pytestmark = pytest.mark.crash

DRIVER = Path(__file__).resolve().with_name("answers_driver.py")


def drive(store_url: str, workdir: Path, case: str, crash_at: str | None) -> tuple[int, str, str]:
    argv = [sys.executable, str(DRIVER), "--store", store_url, "--dir", str(workdir)]
    return run_process([*argv, "--case", case], crash_at=crash_at)


def outcome(result: tuple[int, str, str]) -> dict[str, Any]:
    (line,) = [x for x in result[1].splitlines() if x.startswith("outcome ")]
    parsed: dict[str, Any] = json.loads(line.removeprefix("outcome "))
    return parsed


def served(workdir: Path) -> list[tuple[str, int, int]]:
    """What the policy answered, in order: (prompt, round within the turn, pid)."""
    lines = (workdir / "model.log").read_text().splitlines()
    return [tuple(json.loads(line)) for line in lines]  # type: ignore[misc]


def events(store_url: str) -> list[str]:
    return read_store(store_url, lambda v: [e.type for e in v.events(SESSION, 0, None)])


@pytest.mark.parametrize("point", ["model.after-finish", "output.after-reject"])
def test_a_typed_answer_killed_around_its_rejection_is_rejected_once(
    store_url: str, workdir: Path, point: str
) -> None:
    assert_crashed(drive(store_url, workdir, "typed", point), point)
    rested = drive(store_url, workdir, "typed", None)
    assert_clean(rested, "the run to rest")
    assert outcome(rested) == {
        "status": "completed",
        "text": '{"score": 8, "reason": "it shipped"}',
        "output": {"score": 8, "reason": "it shipped"},
        "error": None,
    }
    world = read_world(store_url, workdir)
    assert_invariants(world, [REQUEST], sessions=1)
    kinds = events(store_url)
    assert kinds.count("output.rejected") == 1, kinds
    assert kinds.count("model.completed") == 2, "the invalid answer and the valid one"
    # The last request the policy served follows the rejection note (the story kit's log
    # names a turn by its latest user message); each before it answered the prompt.
    asked = [prompt for prompt, _, _ in served(workdir)]
    assert asked[-1].startswith(REJECTED_ANSWER_HEADING), asked
    if point == "model.after-finish":  # the invalid answer was never recorded: asked again
        assert asked[:-1] == [PROMPT, PROMPT], asked
    else:  # recovery read the recorded rejection: the model was asked once more, not twice
        assert asked[:-1] == [PROMPT], asked
    (sub,) = world.submissions
    assert sub.interruptions == 1 and sub.output == '{"score":8,"reason":"it shipped"}'


def test_a_paused_turn_killed_before_its_continuation_continues_after_recovery(
    store_url: str, workdir: Path
) -> None:
    point = "model.after-pause"
    assert_crashed(drive(store_url, workdir, "pause", point), point)
    rested = drive(store_url, workdir, "pause", None)
    assert_clean(rested, "the run to rest")
    assert outcome(rested)["text"] == PAUSED_TEXT + CONTINUED_TEXT
    assert_invariants(read_world(store_url, workdir), [REQUEST], sessions=1)

    # The killed run wrote nothing to http.jsonl: the one line is the recovery's server, which
    # saw one request, the continuation (the paused response was served from its record).
    (recovery,) = [json.loads(line) for line in (workdir / "http.jsonl").read_text().splitlines()]
    (continuation,) = recovery["requests"]
    assert continuation["status"] == 200, continuation
    paused = continuation["body"]["messages"][-1]
    assert paused["role"] == "assistant"
    assert [b["type"] for b in paused["content"]] == [
        "server_tool_use",
        "web_search_tool_result",
        "text",
    ]
    assert continuation["body"]["container"].startswith("container_")
    calls = read_store(
        store_url,
        lambda v: [
            (c.round, c.stop_reason) for s in v.submissions(SESSION) for c in v.model_calls(s.id)
        ],
    )
    assert calls == [(0, "pause_turn"), (1, "end_turn")], calls
