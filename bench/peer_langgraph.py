"""LangGraph: a ``StateGraph`` looping through one no-op node for N supersteps, checkpointed by
``SqliteSaver``.

Modes: WAL with ``synchronous=FULL`` and ``NORMAL`` (set on the saver's connection; the saver
itself sets WAL), each with ``durability="sync"`` (the checkpoint of a superstep is written
before the next one starts: the durable comparison) and ``"async"`` (written in the
background while the next superstep runs; LangGraph's default). Each unit is one ``invoke`` on
a fresh thread id.

The batch workload (issue 23's parallel row): one superstep of N no-op nodes, every one an
edge from ``START`` (LangGraph runs the nodes of a superstep in parallel, then checkpoints
once), each appending to a list channel with an ``operator.add`` reducer; WAL+FULL with
``durability="sync"`` only.

Run by :mod:`bench.peers` as ``python -m bench.peer_langgraph``; needs ``make bench-venv``.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.peers import BATCH, STEPS, peer_main, seconds_per_step

MODES = ("WAL+FULL sync", "WAL+FULL async", "WAL+NORMAL sync", "WAL+NORMAL async")
BATCH_MODES = ("WAL+FULL sync",)


class LoopState(TypedDict):
    count: int
    limit: int


def _step(state: LoopState) -> dict[str, int]:
    return {"count": state["count"] + 1}


def _next(state: LoopState) -> str:
    return "step" if state["count"] < state["limit"] else "__end__"


class BatchState(TypedDict):
    done: Annotated[list[int], operator.add]


def _batch_node(i: int) -> Any:  # Any: add_node's overloads reject a plain callable here
    def node(state: BatchState) -> dict[str, list[int]]:
        return {"done": [i]}

    return node


def measure(directory: Path, mode: str, ns: Sequence[int], steps: int) -> dict[str, float]:
    from langgraph.graph import END, START, StateGraph

    def loop(n: int) -> Any:
        builder = StateGraph(LoopState)
        builder.add_node("step", _step)
        builder.add_edge(START, "step")
        builder.add_conditional_edges("step", _next, {"step": "step", "__end__": END})
        return builder, {"count": 0, "limit": n}, lambda result: result["count"]

    return _measure_graphs(directory, mode, ns, steps, loop)


def measure_batch(directory: Path, mode: str, ns: Sequence[int], calls: int) -> dict[str, float]:
    from langgraph.graph import END, START, StateGraph

    def fan_out(n: int) -> Any:
        builder = StateGraph(BatchState)
        for i in range(n):
            builder.add_node(f"call{i}", _batch_node(i))
            builder.add_edge(START, f"call{i}")
            builder.add_edge(f"call{i}", END)
        return builder, {"done": []}, lambda result: len(result["done"])

    return _measure_graphs(directory, mode, ns, calls, fan_out)


def _measure_graphs(
    directory: Path, mode: str, ns: Sequence[int], steps: int, graph_of: Callable[[int], Any]
) -> dict[str, float]:
    """Seconds per step at each N of invokes of the graph ``graph_of(N)`` returns (with its
    input and how many steps a result ran), checkpointed by one SqliteSaver for the mode."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    pragmas, durability = mode.split(" ")
    synchronous = pragmas.removeprefix("WAL+")
    conn = sqlite3.connect(directory / "langgraph.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    saver = SqliteSaver(conn)
    graphs = {}
    for n in ns:
        builder, start, ran = graph_of(n)
        graphs[n] = (builder.compile(checkpointer=saver), start, ran)
    threads = itertools.count()

    def unit(n: int) -> Any:
        graph, start, ran = graphs[n]
        config: Any = {"configurable": {"thread_id": f"t{next(threads)}"}, "recursion_limit": n + 5}
        result = graph.invoke(start, config, durability=durability)
        if ran(result) != n:
            raise RuntimeError(f"the graph ran {ran(result)} steps, not {n}")
        return result

    try:
        return {str(n): seconds_per_step(unit, n, steps) for n in ns}
    finally:
        conn.close()


def _import() -> object:
    import langgraph.checkpoint.sqlite

    return langgraph.checkpoint.sqlite


if __name__ == "__main__":
    workloads = {STEPS: (MODES, measure), BATCH: (BATCH_MODES, measure_batch)}
    sys.exit(peer_main("langgraph", _import, workloads))
