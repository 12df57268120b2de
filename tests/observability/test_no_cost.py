"""Without OpenTelemetry in the application, tracing costs nothing: nothing of it is
imported by ``import fxdurable`` or by a turn, and a hook allocates nothing that stays."""

from __future__ import annotations

import subprocess
import sys
import textwrap

TURN_WITHOUT_OTEL = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, "tests/observability")
    import fxdurable as fx
    from obs_agents import ANSWER, PROMPT, agent

    async def main():
        async with fx.Runtime([agent()], store=sys.argv[1]) as rt:
            assert await rt.session("s1").run(PROMPT, timeout=10) == ANSWER

    asyncio.run(main())
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """
)


def test_a_turn_without_opentelemetry_imports_none_of_it(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", TURN_WITHOUT_OTEL, f"sqlite:///{tmp_path}/x.db"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
    ).stdout
    assert out.strip() == "[]"


NOOP_HOOKS = textwrap.dedent(
    """
    import asyncio, sys, tracemalloc
    from types import SimpleNamespace
    from fxdurable.runtime import tracing

    @tracing.tool_call
    async def run_tool(driver, task):
        return None

    @tracing.tool_outcome
    async def finish(driver, task, status, result):
        return None

    task = SimpleNamespace(id="t", tool="x", policy="safe", execution_id="e", runs=0)

    async def steps(n):
        for _ in range(n):
            await run_tool(None, task)
            await finish(None, task, "completed", "out")
            with tracing.turn("eng") as span:
                assert span.trace_parent is None

    asyncio.run(steps(100))  # warm up
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    asyncio.run(steps(5000))
    after = tracemalloc.take_snapshot()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if "tracing" in str(s.traceback))
    print(grown, sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """
)


def test_a_hook_without_opentelemetry_keeps_nothing():
    out = subprocess.run(
        [sys.executable, "-c", NOOP_HOOKS], capture_output=True, text=True, check=True
    ).stdout
    grown, modules = out.strip().split(" ", 1)
    assert modules == "[]"
    assert int(grown) <= 0
