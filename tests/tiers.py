"""The two tiers of the suite: ``system`` tests start a process or a server; the rest is the
fast tier (``make test-fast``, ``pytest --fast``).

Marking is automatic (``mark_system``, from ``tests/conftest.py``), so a new test is placed
without editing its file: a test is ``system`` when it uses a fixture that starts a server or a
process (``SYSTEM_FIXTURES``), when it runs on a backend parameter that needs one
(``SYSTEM_PARAMS``: the store and worker fixtures ask for their server with
``request.getfixturevalue``, invisible at collection), when it carries a mark that implies one
(``crash``, ``redis``, ``aws``), or when its file is listed in ``SYSTEM_PATHS`` (the files whose
tests start subprocesses themselves). An explicit ``@pytest.mark.system`` works too.

So that the fast tier cannot rot, ``--fast`` also forbids starting a process: while a fast-tier
test (its fixtures included) runs, ``os.fork``, ``forkpty``, ``system``, ``posix_spawn`` and
``fork_exec`` (what ``subprocess``, ``asyncio``'s subprocesses and ``multiprocessing`` all go
through) raise ``SpawnInFastTier``, and the test fails even if it caught that, naming the fix.
"""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]
import json
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

FAST_OPTION = "--fast"
RECORD_OPTION = "--record-durations"
DURATIONS = Path(__file__).with_name("durations.json")

# Fixtures (direct or through other fixtures) that start a server or a process.
SYSTEM_FIXTURES = frozenset(
    {
        "redis_server",  # redis-server
        "redis_url",
        "redis_factory",
        "postgres_server",  # initdb + postgres (tests/postgres_support.py)
        "postgres_url",
        "postgres_factory",
        "moto_server",  # python -m moto.server
        "serial_moto_server",
        "rq_redis",  # tests/workers: a redis-server of their own
        "served",  # tests/http: fxdurable serve subprocesses
        "crash",  # tests/crash: the harness runs the turn in a child it SIGKILLs
        "browser",  # tests/console: chromium
        "dev_server",
        "serve",
        "lambda_world",  # moto
    }
)
# Backend parameters whose fixtures start (or need) a server through getfixturevalue.
SYSTEM_PARAMS = frozenset({"redis", "dynamodb", "dynamodb-s3", "postgres", "postgres-s3"})
SYSTEM_MARKS = frozenset({"crash", "redis", "aws"})
# Where tests start subprocesses themselves (a CLI run, a shell tool, a wheel build, a worker),
# relative to the repository: a directory ("tests/e2e/"), a file, or a test function of a file
# ("file::test_name", every parametrization of it). A test missing here fails the fast tier
# (the guard below), naming this list.
SYSTEM_PATHS: tuple[str, ...] = (
    "tests/adapters/test_framework_versions.py::test_each_import_checks_the_release_first_and_import_fxdurable_loads_no_framework",
    "tests/adapters/test_langchain_middleware_project.py",
    "tests/adapters/test_openai_agents_session_project.py",
    "tests/aws_lambda/",
    "tests/bench/test_bench_smoke.py",
    "tests/bench/test_lambda_bench.py",
    "tests/bench/test_rq_job_setup.py",
    "tests/bench/test_soak.py",
    "tests/bench/test_startup.py",
    "tests/cli/test_bad_input.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_imports.py",
    "tests/coding_agent/",
    "tests/console/",
    "tests/crash/",
    "tests/e2e/",
    "tests/examples/",
    "tests/http/test_http_demo_mode.py",
    "tests/http/test_http_routes.py::test_bad_idempotency_keys_are_refused",  # `limited`
    "tests/http/test_http_routes.py::test_bad_post_bodies_get_a_json_error_and_change_nothing",
    "tests/http/test_http_routes.py::test_bad_reads_get_a_json_error",
    "tests/http/test_http_routes.py::test_the_server_log_has_no_traceback_after_bad_input",
    "tests/infra/test_localstack_config.py::test_each_init_script_is_valid_bash",
    "tests/infra/test_sam_template.py::test_cfn_lint_passes_on_the_template_and_fails_on_a_broken_one",
    "tests/mcp/",  # real MCP server processes (stdio and HTTP)
    "tests/models/test_provider_docs.py::test_the_docs_check_of_where_a_model_points",
    "tests/observability/test_no_cost.py",
    "tests/runtime/test_leases_continuation.py::test_lease_of_a_live_owner_is_left_alone_until_it_expires",
    "tests/runtime/test_parallel_tools.py::test_the_docs_example_runs",
    "tests/runtime/test_runtime_close.py",
    "tests/stores/test_sqlite_faults.py::test_a_full_disk_fails_the_admission_and_leaves_the_store_intact",
    "tests/stores/test_store_contract.py::test_sqlite_processes_opening_a_new_file_at_once_all_succeed",
    "tests/stores/test_store_race.py",  # two writer processes per store
    "tests/stores/test_attachment_blobs_s3.py",  # the moto server
    "tests/test_lazy_imports.py",
    "tests/test_makefile_venv.py",
    "tests/test_no_merge_leftovers.py",  # git ls-files
    "tests/test_readme.py",
    "tests/testing/test_model_server_cli.py",
    "tests/tools/test_stored_workspace.py",
    "tests/tools/test_ws_export.py",
    "tests/tools/test_ws_file_tools.py::test_the_tool_lists_and_a_second_shell_under_another_name_and_policy",
    "tests/tools/test_ws_imports.py::test_importing_the_tools_and_making_a_directory_workspace_loads_no_runtime",
    "tests/tools/test_ws_runtime.py",
    "tests/tools/test_ws_shell.py",
    "tests/workers/test_freeze_outside_a_commit.py::test_a_process_is_frozen_only_between_its_commits",
    "tests/workers/test_lease_release_effects.py",
    "tests/workers/test_lost_lease_effects.py",
)


class SpawnInFastTier(RuntimeError):
    """A test of the fast tier started a process."""


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        RECORD_OPTION,
        action="store_true",
        help=f"write each file's seconds in this run to {DURATIONS.name} (tests/tiers.py)",
    )
    parser.addoption(
        FAST_OPTION,
        action="store_true",
        help="run the fast tier only: deselect the system tests and fail any test that "
        "starts a process (tests/tiers.py)",
    )


def _is_system(item: pytest.Item, root: str) -> bool:
    if item.get_closest_marker("system") is not None:
        return True
    if SYSTEM_MARKS.intersection(m.name for m in item.iter_markers()):
        return True
    if SYSTEM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(
        isinstance(v, str) and v in SYSTEM_PARAMS for v in callspec.params.values()
    ):
        return True
    path = os.path.relpath(str(item.path), root).replace(os.sep, "/")
    function = f"{path}::{getattr(item, 'originalname', item.name)}"
    return any(
        p in (path, function) or (p.endswith("/") and path.startswith(p)) for p in SYSTEM_PATHS
    )


def mark_system(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the system tests; with ``--fast``, deselect them."""
    root = str(config.rootpath)
    fast: list[pytest.Item] = []
    system: list[pytest.Item] = []
    for item in items:
        if _is_system(item, root):
            item.add_marker(pytest.mark.system)
            system.append(item)
        else:
            fast.append(item)
    if config.getoption(FAST_OPTION) and system:
        config.hook.pytest_deselected(items=system)
        items[:] = fast


# -- the guard ------------------------------------------------------------------------------

_spawned: list[str] = []  # what the running fast-tier test tried to start


def _refuse(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        what = args[0] if args else kwargs.get("args") or kwargs.get("path")
        _spawned.append(f"{name}({what!r})")
        raise SpawnInFastTier(
            f"a fast-tier test started a process ({name}: {what!r}): "
            "mark it system (tests/tiers.py says how)"
        )

    return refuse


@contextmanager
def _no_processes() -> Iterator[None]:
    saved = [
        (os, "fork", os.fork),
        (os, "forkpty", os.forkpty),
        (os, "system", os.system),
        (os, "posix_spawn", os.posix_spawn),
        (os, "posix_spawnp", os.posix_spawnp),
        (_posixsubprocess, "fork_exec", _posixsubprocess.fork_exec),
    ]
    if hasattr(subprocess, "_fork_exec"):  # 3.11+: subprocess imported fork_exec by name
        saved.append((subprocess, "_fork_exec", subprocess._fork_exec))
    for module, name, _ in saved:
        setattr(module, name, _refuse(f"{module.__name__}.{name}"))
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def guard(item: pytest.Item) -> Generator[None, None, None]:
    """The body of a ``pytest_runtest_protocol`` hook wrapper: with ``--fast``, the item's
    setup, call and teardown run with process creation refused."""
    if not item.config.getoption(FAST_OPTION):
        yield
        return
    _spawned.clear()
    with _no_processes():
        yield


def fail_if_spawned(report: pytest.TestReport) -> None:
    """A fast-tier test that started a process fails, even if it swallowed the error."""
    spawned = list(_spawned)
    _spawned.clear()  # reported once, in the phase that did it
    if spawned and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{report.nodeid} started a process in the fast tier: "
            + ", ".join(spawned)
            + "\nmark it system (tests/tiers.py: SYSTEM_FIXTURES, SYSTEM_PATHS or "
            "@pytest.mark.system)"
        )


# -- the order files start in ---------------------------------------------------------------

# Seconds each test file took in a whole run (tests/durations.json, written by
# ``scripts/run-tests --record-durations``: a file's figure is the sum of its tests' setup, call
# and teardown). Under xdist (scripts/run-tests passes --no-loadscope-reorder), files start
# longest first, so the long ones do not make the tail of the run: xdist's own order is by
# number of tests, which puts the one-test files that take minutes last. A file not listed
# counts as UNKNOWN_S.
UNKNOWN_S = 5.0


def longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput") or not DURATIONS.exists():
        return  # a serial run keeps pytest's order
    seconds: dict[str, float] = json.loads(DURATIONS.read_text())["files"]
    root = str(config.rootpath)

    def key(item: pytest.Item) -> float:
        path = os.path.relpath(str(item.path), root).replace(os.sep, "/")
        return -seconds.get(path, UNKNOWN_S)

    items.sort(key=key)  # stable: a file's tests keep their order and stay together


_seconds: dict[str, float] = {}
# CPU seconds per file beside the wall seconds: this process's and the children it reaped
# (a test's subprocesses, not the servers of session fixtures). A file whose CPU is far below
# its wall time waits: on a sleep, a timeout, a server, which more workers than cores would
# overlap and which an event to wait on would shorten.
_cpu_s: dict[str, float] = {}
_cpu_mark = [0.0]


def _cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def note_cpu(report: pytest.TestReport) -> None:
    """Put the CPU seconds since the previous phase's report into this one's (where the test
    ran: under xdist, a worker), for :func:`record` to add up."""
    now = _cpu_now()
    spent, _cpu_mark[0] = (now - _cpu_mark[0] if _cpu_mark[0] else 0.0), now
    report.user_properties.append(("cpu_s", spent))


def record(report: pytest.TestReport) -> None:
    """Add a report's seconds to its file's (where the reports arrive: under xdist, the
    controller)."""
    path = report.nodeid.split("::", 1)[0]
    _seconds[path] = _seconds.get(path, 0.0) + report.duration
    cpu = sum(float(v) for k, v in report.user_properties if k == "cpu_s")
    _cpu_s[path] = _cpu_s.get(path, 0.0) + cpu


def write_durations(session: pytest.Session) -> None:
    if not session.config.getoption(RECORD_OPTION) or hasattr(session.config, "workerinput"):
        return
    # Merged into what is there: a run of some files updates theirs and keeps the others'.
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    files, cpu = known.get("files", {}), known.get("cpu", {})
    files.update((path, round(s, 1)) for path, s in _seconds.items())
    cpu.update((path, round(s, 1)) for path, s in _cpu_s.items())
    merged = {"files": dict(sorted(files.items())), "cpu": dict(sorted(cpu.items()))}
    DURATIONS.write_text(json.dumps(merged, indent=1) + "\n")
