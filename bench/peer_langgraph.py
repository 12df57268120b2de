"""LangGraph: a ``StateGraph`` looping through one no-op node for N supersteps, checkpointed by
``SqliteSaver``.

Modes: WAL with ``synchronous=FULL`` and ``NORMAL`` (set on the saver's connection; the saver
itself sets WAL), each with ``durability="sync"`` (the checkpoint of a superstep is written
before the next one starts: the durable comparison) and ``"async"`` (written in the
background while the next superstep runs; LangGraph's default). Each unit is one ``invoke`` on
a fresh thread id.

Run by :mod:`bench.peers` as ``python -m bench.peer_langgraph``; needs ``make bench-venv``.
"""

from __future__ import annotations

import itertools
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from bench.peers import peer_main, seconds_per_step

MODES = ("WAL+FULL sync", "WAL+FULL async", "WAL+NORMAL sync", "WAL+NORMAL async")


class LoopState(TypedDict):
    count: int
    limit: int


def _step(state: LoopState) -> dict[str, int]:
    return {"count": state["count"] + 1}


def _next(state: LoopState) -> str:
    return "step" if state["count"] < state["limit"] else "__end__"


def measure(directory: Path, mode: str, ns: Sequence[int], steps: int) -> dict[str, float]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    pragmas, durability = mode.split(" ")
    synchronous = pragmas.removeprefix("WAL+")
    conn = sqlite3.connect(directory / "langgraph.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    saver = SqliteSaver(conn)
    builder = StateGraph(LoopState)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", _next, {"step": "step", "__end__": END})
    graph = builder.compile(checkpointer=saver)
    threads = itertools.count()

    def unit(n: int) -> Any:
        config: Any = {"configurable": {"thread_id": f"t{next(threads)}"}, "recursion_limit": n + 5}
        result = graph.invoke({"count": 0, "limit": n}, config, durability=durability)
        if result["count"] != n:
            raise RuntimeError(f"the graph ran {result['count']} supersteps, not {n}")
        return result

    try:
        return {str(n): seconds_per_step(unit, n, steps) for n in ns}
    finally:
        conn.close()


def _import() -> object:
    import langgraph.checkpoint.sqlite

    return langgraph.checkpoint.sqlite


if __name__ == "__main__":
    sys.exit(peer_main("langgraph", _import, MODES, measure))
