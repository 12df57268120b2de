"""The fast tier's guard (tests/tiers.py) refuses every way a test starts a process, puts
everything back afterwards, and fails a test that swallowed the refusal; the marking puts the
tests that need a server in the system tier."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess

import pytest
import tiers


def _start_with_asyncio() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec("true")

    asyncio.run(start())


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run(["true"], check=False),
        lambda: subprocess.Popen(["true"]),
        lambda: os.system("true"),
        _start_with_asyncio,
        lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
        lambda: multiprocessing.get_context("fork").Process(target=print).start(),
        lambda: os.fork(),
    ],
    ids=["run", "popen", "system", "asyncio", "mp-spawn", "mp-fork", "fork"],
)
def test_the_guard_refuses_each_way_to_start_a_process(start: object) -> None:
    before = (os.fork, os.posix_spawn, subprocess._fork_exec)  # type: ignore[attr-defined]
    with tiers._no_processes():
        with pytest.raises(tiers.SpawnInFastTier, match="mark it system"):
            start()  # type: ignore[operator]
        assert tiers._spawned
    tiers._spawned.clear()
    assert (os.fork, os.posix_spawn, subprocess._fork_exec) == before  # type: ignore[attr-defined]


def test_a_test_that_swallowed_the_refusal_still_fails() -> None:
    report = pytest.TestReport("tests/x.py::test_x", ("x", 1, "x"), {}, "passed", None, "call")
    tiers._spawned.append("subprocess._fork_exec(['true'])")
    tiers.fail_if_spawned(report)
    assert report.outcome == "failed" and "mark it system" in str(report.longrepr)
    assert not tiers._spawned
    clean = pytest.TestReport("tests/x.py::test_y", ("x", 1, "x"), {}, "passed", None, "call")
    tiers.fail_if_spawned(clean)
    assert clean.outcome == "passed"


def test_the_tests_on_a_server_are_marked_and_the_fast_tier_has_none(
    request: pytest.FixtureRequest,
) -> None:
    """Over whatever this run selected: a test on a server's fixture, on a Redis parameter or
    in a listed directory is ``system``; this one is not; under ``--fast`` none ran."""
    items = request.session.items
    system = {i.nodeid for i in items if i.get_closest_marker("system")}
    assert request.node.nodeid not in system
    for item in items:
        if {"redis_url", "moto_server", "rq_redis"} & set(getattr(item, "fixturenames", ())):
            assert item.nodeid in system, item.nodeid
        # A backend parameter (the store fixtures start its server through getfixturevalue);
        # a parameter that only spells a URL, e.g. "redis://host:port/db", starts nothing.
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        backends = {v for v in params if isinstance(v, str)}
        on_server = bool({"redis", "dynamodb", "dynamodb-s3"} & backends)
        if item.nodeid.startswith(("tests/crash/", "tests/e2e/")) or on_server:
            assert item.nodeid in system, item.nodeid
    if request.config.getoption(tiers.FAST_OPTION):
        assert not system, f"the fast tier ran system tests: {sorted(system)[:5]}"
