"""``examples/rq_workers`` as a user runs it: copied into an empty directory, the wheel
installed with the ``redis`` extra, ``fxdurable worker`` processes started from that
directory with ``FXD_AGENTS=myagents:agents``, and the README's lines run verbatim, on the
test Redis (the README's URLs swapped for this test's key prefix and queue; a trailing ``&``
becomes a background process of the test's), with a scripted model served as the
OpenAI-compatible provider."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from examples_support import (
    EXTRAS,
    Ran,
    copy_example,
    exported,
    ok,
    readme_block,
    run_line,
    user_env,
)
from wheel_support import wheel_venv

from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import call, reply, turn_messages
from fxdurable.testing.model_server import Quirks, ScriptedModelServer

EXAMPLE = "rq_workers"
HERE = "tests/examples/test_rq_workers.py"
TWO_WORKERS = f"{HERE}::test_two_workers_run_a_turn_and_the_store_checks_clean"
KILLED = f"{HERE}::test_a_worker_killed_mid_publish_the_other_finishes_with_one_report"
README_STORE = "redis://127.0.0.1:6379/0"
README_QUEUE = "rq://127.0.0.1:6379/0"
KEY = "sk-test-reporter-0123456789"

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.crash]


def reporter_policy(request: ModelRequest) -> ModelResponse:
    results = [m for m in turn_messages(request) if m.role == "tool"]
    if not results:
        return reply("Fetching this week's metrics.", call("fetch_metrics"))
    last = results[-1]
    if last.tool_name == "fetch_metrics":
        body = f"This week: {last.text}."
        publish = call("publish_report", title="Weekly report", body=body)
        return reply("Publishing the report.", publish)
    metrics = dict(pair.split("=") for pair in results[0].text.split(", "))
    return reply(
        f"I published 'Weekly report': {metrics['signups']} signups, {metrics['churned']} "
        f"churned, {metrics['tickets_closed']} tickets closed."
    )


class Background:
    """A README line ending in ``&``: a process of its own group, its output in a file."""

    def __init__(self, line: str, *, cwd: Path, env: dict[str, str], log: Path) -> None:
        assert line.endswith("&"), line
        self.line = line.removesuffix("&").strip()
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", self.line],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def output(self) -> str:
        return self.log.read_text()

    def wait_done(self, timeout: float, *, watching: list[Background]) -> int:
        """Its exit status; fails as soon as one of ``watching`` (the workers it needs) exits,
        with their output, or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (code := self.proc.poll()) is None:
            gone = [w for w in watching if w.proc.poll() is not None]
            if gone or time.monotonic() > deadline:
                logs = "\n".join(f"--- {w.line}\n{w.output}" for w in watching)
                why = "a worker exited" if gone else f"still running after {timeout:g}s"
                pytest.fail(f"`{self.line}`: {why}\n{self.output}\n{logs}")
            time.sleep(0.1)
        return code

    def wait_killed(self, timeout: float) -> None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{self.line}` still runs after {timeout:g}s:\n{self.output}")
        ran = Ran(self.line, code, self.output, self.output)
        assert ran.killed, f"`{self.line}` exited {code}, not SIGKILLed:\n{self.output}"

    def stop(self) -> None:
        """SIGTERM (RQ's warm shutdown) to its group; SIGKILL if it does not go in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def provider() -> Iterator[dict[str, str]]:
    with ScriptedModelServer(reporter_policy, quirks=Quirks(require_api_key=KEY)) as server:
        yield {
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": KEY,
            "AGENT_MODEL": "openai/scripted-reporter",
        }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_example(EXAMPLE, tmp_path)


@pytest.fixture
def shell_env(project: Path, redis_url: str, provider: dict[str, str]) -> dict[str, str]:
    """The environment after the README's ``export STORE=... QUEUE=...`` line, with this
    test's store prefix and a queue of its own."""
    base, _, query = redis_url.partition("?")
    [prefix] = parse_qs(query)["prefix"]
    queue = f"rq{base.removeprefix('redis')}?queue={prefix}"
    [export, *_] = readme_block(EXAMPLE, TWO_WORKERS)
    assert README_STORE in export and README_QUEUE in export, export
    export = export.replace(README_STORE, redis_url).replace(README_QUEUE, queue)
    venv = wheel_venv(EXTRAS)
    return exported([export], cwd=project, env=user_env(venv, **provider))


def outbox(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "outbox").glob("*.txt"))


def test_two_workers_run_a_turn_and_the_store_checks_clean(
    project: Path, shell_env: dict[str, str]
) -> None:
    _, worker_1, worker_2, submit, trace, check = readme_block(EXAMPLE, TWO_WORKERS)
    with ExitStack() as running:
        workers = []
        for n, line in enumerate((worker_1, worker_2)):
            worker = Background(line, cwd=project, env=shell_env, log=project / f"w{n}.log")
            running.callback(worker.stop)
            workers.append(worker)
        submitter = Background(submit + " &", cwd=project, env=shell_env, log=project / "s.log")
        running.callback(submitter.stop)
        assert submitter.wait_done(90, watching=workers) == 0, submitter.output
        out = submitter.output
        for worker in workers:
            assert worker.proc.poll() is None, worker.output
        timeline = ok(run_line(trace, cwd=project, env=shell_env))
        audit = ok(run_line(check, cwd=project, env=shell_env))
    for worker in workers:  # a warm shutdown, not a crash
        assert worker.proc.returncode == 0, worker.output
        # Its first words say where the model is called and which setting said so.
        assert "(from OPENAI_BASE_URL; key from OPENAI_API_KEY: set)" in worker.output
    assert "admitted sub-" in out and "attempt 1 started on worker" in out
    assert "tool publish_report running (run 1, idempotent)" in out
    assert "completed: I published 'Weekly report': 120 signups, 3 churned" in out
    [report] = outbox(project)
    assert report.removesuffix(".txt") in out  # the key publish_report was called with
    assert "publish_report" in timeline and "turn completed" in timeline
    assert "every invariant holds" in audit


def test_a_worker_killed_mid_publish_the_other_finishes_with_one_report(
    project: Path, shell_env: dict[str, str]
) -> None:
    doomed, submit, survivor, show, trace, check = readme_block(EXAMPLE, KILLED)
    assert "FXD_CRASH_AT=tool.after-execute:publish_report" in doomed
    with ExitStack() as running:
        first = Background(doomed, cwd=project, env=shell_env, log=project / "first.log")
        running.callback(first.stop)
        submitter = Background(submit + " &", cwd=project, env=shell_env, log=project / "s.log")
        running.callback(submitter.stop)
        first.wait_killed(timeout=60)
        assert "crash injected at tool.after-execute:publish_report" in first.output
        [published_before_the_crash] = outbox(project)
        second = Background(survivor, cwd=project, env=shell_env, log=project / "second.log")
        running.callback(second.stop)
        assert submitter.wait_done(90, watching=[second]) == 0, submitter.output
        listed = ok(run_line(show, cwd=project, env=shell_env))
        timeline = ok(run_line(trace, cwd=project, env=shell_env))
        audit = ok(run_line(check, cwd=project, env=shell_env))
    out = submitter.output
    assert "attempt 1 was interrupted (its worker died)" in out
    assert "tool publish_report running (run 2, idempotent)" in out
    assert "completed: I published 'Weekly report'" in out
    starts = [line.split()[-1] for line in out.splitlines() if "started on worker" in line]
    assert len(starts) == 2 and starts[0] != starts[1], starts  # two workers, one each
    # Run twice with one key: one report.
    assert outbox(project) == [published_before_the_crash]
    assert listed.split() == [published_before_the_crash]
    assert "run 2" in timeline
    assert "every invariant holds" in audit
