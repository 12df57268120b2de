"""The headline's step rows from hand-made figures: what each row compares, and its ratio."""

from __future__ import annotations

import pytest

from bench.headline import Headline
from bench.peer_fxdurable import ONE_RESPONSE
from bench.peers import PeerRun


def _run(system: str, figures: dict[str, float]) -> PeerRun:
    run = PeerRun(system)
    for mode, seconds in figures.items():
        run.add({mode: {"10": seconds}})
    return run


def _headline(fxd: dict[str, float]) -> Headline:
    peers = {
        "fxdurable": _run("fxdurable", fxd),
        "DBOS": _run("DBOS", {"WAL+FULL": 0.003}),
        "LangGraph": _run("LangGraph", {"WAL+FULL sync": 0.002}),
    }
    return Headline(mode="quick", ns=(10,), peers=peers)


def test_the_tool_step_row_compares_one_response_with_the_peers_steps() -> None:
    headline = _headline({"WAL+FULL": 0.004, "WAL+FULL" + ONE_RESPONSE: 0.001})
    rows = {row.what: row for row in headline.step_rows()}
    round_row = rows["ms per step, 10 steps per unit, WAL+FULL"]
    tool_row = rows["ms per tool step, 10 calls of one response, WAL+FULL"]
    # The cheaper peer (LangGraph, 2 ms) over fxdurable's figure of the row's own shape.
    assert round_row.ratio is not None and round_row.ratio.median == pytest.approx(0.5)
    assert tool_row.ratio is not None and tool_row.ratio.median == pytest.approx(2.0)
    assert tool_row.cells == {"fxdurable": "1.00", "DBOS": "3.00", "LangGraph": "2.00"}
    assert tool_row.target == "≥ 2" and tool_row.met == "yes"
    assert round_row.met == "no"


def test_no_tool_step_row_where_its_mode_was_not_measured() -> None:
    headline = _headline({"WAL+FULL": 0.004})
    assert not [row for row in headline.step_rows() if "calls of one response" in row.what]
