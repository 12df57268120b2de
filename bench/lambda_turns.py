"""A turn across many Lambda invocations, on moto: what handing the rest on costs.

The wake function (:class:`fxdurable.aws_lambda.wake.WakeFunction`, one warm sandbox, in this
process) runs one ``ticks``-tool turn (each tool a short sleep) on a SQLite store and a moto
SQS queue (``python -m moto.server`` on 127.0.0.1), driven like Lambda's poller: receive up to
ten messages, call the handler with a context, delete what it did not report failed, until
the session rests. Timed from the admission's wake until rest:

* **one invocation**: the context leaves it 900 s, so the whole turn runs in one;
* **many invocations**: the margin leaves each invocation about one step (a model call or a
  tool; a step that ends within a few milliseconds may be followed by one more) before it
  hands the rest on: suspend, enqueue the continuation, release, and the next invocation
  receives it, claims, resumes from the record.

The ratio many/one is the figure; the difference divided by the extra invocations is what one
hand-off costs on this machine (moto's HTTP round trips and SQLite commits included). Relative
figures only: moto is not SQS, and its long poll returns as soon as a message is there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from fxdurable import Agent, ScriptedModel, call, define_tool, reply

__all__ = ["LambdaFigures", "measure_lambda_turns", "render_lambda", "unavailable_reason"]

REGION = "us-east-1"
DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
LONG_S = 900.0  # Lambda's longest timeout: the whole turn fits
SHORT_S = 5.0  # with SHORT_MARGIN_S, about one step per invocation
SHORT_MARGIN_S = 4.99


def unavailable_reason() -> str | None:
    for module, extra in (("boto3", "lambda"), ("mangum", "lambda"), ("moto", "moto[server]")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {extra!r})"
    return None


@dataclass(frozen=True, slots=True)
class LambdaFigures:
    ticks: int
    one_s: list[float]  # wall per turn, all in one invocation
    many_s: list[float]  # wall per turn, one step per invocation
    one_invocations: int
    many_invocations: int

    @property
    def ratio(self) -> float:
        return statistics.median(self.many_s) / statistics.median(self.one_s)

    @property
    def per_handoff_s(self) -> float:
        extra = self.many_invocations - self.one_invocations
        return (statistics.median(self.many_s) - statistics.median(self.one_s)) / max(extra, 1)


class _Tick(pydantic.BaseModel):
    n: int


def _agent(ticks: int, tick_s: float) -> Agent:
    def tick(inp: _Tick, _ctx: Any) -> str:
        time.sleep(tick_s)
        return f"tick {inp.n}"

    def policy(request: Any) -> Any:
        done = sum(1 for m in request.messages if m.role == "tool")
        return (
            reply(f"tick {done + 1}", call("tick", n=done + 1)) if done < ticks else reply("done")
        )

    tool = define_tool("tick", description="One step.", input_model=_Tick, execute=tick)
    return Agent("bench-lambda", ScriptedModel(policy), tools=[tool])


@contextlib.contextmanager
def _moto(directory: Path) -> Iterator[str]:
    from fxdurable.testing.net import free_port, stop_process, wait_healthy

    port = free_port()
    log = directory / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{endpoint}/moto-api/data.json", proc, timeout_s=30, output=log.read_text)
        yield endpoint
    finally:
        stop_process(proc)


@contextlib.contextmanager
def _dummy_credentials() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in DUMMY_AWS}
    os.environ.update(DUMMY_AWS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Context:
    def __init__(self, seconds: float) -> None:
        self._ends_at = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends_at - time.monotonic()) * 1000)


def _turn(
    sqs: Any, queue_url: str, store_url: str, agent: Agent, *, remaining_s: float, margin_s: float
) -> tuple[float, int]:
    """(wall seconds, invocations) of one turn from its admission's wake to rest."""
    from fxdurable.aws_lambda.config import LambdaConfig
    from fxdurable.aws_lambda.wake import WakeFunction
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal

    config = LambdaConfig(
        store_url=store_url, queue_url=f"sqs://{queue_url}?region={REGION}", margin_s=margin_s
    )
    function = WakeFunction(config, [agent])
    try:
        session = f"bench-{uuid.uuid4().hex[:8]}"
        Journal(function.store, SystemClock(), RandomIds()).admit(
            session, agent=agent.name, prompt="tick"
        )
        started = time.perf_counter()
        function.queue.send_now(session, reason="submitted")  # type: ignore[attr-defined]
        invocations = 0
        while function.store.read(lambda v: bool(v.unsettled_submissions(session))):
            messages = sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                AttributeNames=["All"],
            ).get("Messages", [])  # fmt: skip
            if not messages:
                continue
            invocations += 1
            event = {
                "Records": [
                    {
                        "messageId": m["MessageId"],
                        "body": m["Body"],
                        "attributes": {"ApproximateReceiveCount": "1"},
                    }
                    for m in messages
                ]
            }
            answer = function(event, _Context(remaining_s))
            failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
            if failed:
                raise RuntimeError(f"the wake function failed records {sorted(failed)}")
            for message in messages:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        return time.perf_counter() - started, invocations
    finally:
        function.close()


def measure_lambda_turns(
    directory: Path, *, ticks: int = 6, tick_s: float = 0.02, reps: int = 3
) -> LambdaFigures:
    import boto3

    with _dummy_credentials(), _moto(directory) as endpoint:
        sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION)
        queue_url = sqs.create_queue(QueueName=f"bench-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        store_url = f"sqlite:///{directory}/lambda-bench.db"
        agent = _agent(ticks, tick_s)
        one: list[float] = []
        many: list[float] = []
        counts: dict[str, set[int]] = {"one": set(), "many": set()}
        _turn(sqs, queue_url, store_url, agent, remaining_s=LONG_S, margin_s=1.0)  # warm-up
        for _ in range(reps):  # interleaved, so a drift lands on both
            wall, n = _turn(sqs, queue_url, store_url, agent, remaining_s=LONG_S, margin_s=1.0)
            one.append(wall)
            counts["one"].add(n)
            wall, n = _turn(
                sqs, queue_url, store_url, agent, remaining_s=SHORT_S, margin_s=SHORT_MARGIN_S
            )
            many.append(wall)
            counts["many"].add(n)
        sqs.close()
    for path in directory.glob("lambda-bench.db*"):
        path.unlink()
    (directory / "moto.log").unlink(missing_ok=True)
    return LambdaFigures(ticks, one, many, max(counts["one"]), max(counts["many"]))


def render_lambda(figures: LambdaFigures | None, note: str | None = None) -> str:
    title = "Lambda wake function on moto SQS + SQLite: one turn across invocations"
    if figures is None:
        return f"{title}\n  {note}"
    one = statistics.median(figures.one_s)
    many = statistics.median(figures.many_s)
    return "\n".join(
        [
            title,
            f"  {figures.ticks}-tool turn, one invocation        "
            f"{one * 1000:8.1f} ms  ({figures.one_invocations} invocation)",
            f"  same turn, handed on after ~each step"
            f"{many * 1000:8.1f} ms  ({figures.many_invocations} invocations)",
            f"  one hand-off (suspend, enqueue, receive, claim, resume)  "
            f"{figures.per_handoff_s * 1000:.1f} ms",
            f"ratio lambda_many_invocations_vs_one = {figures.ratio:.2f}",
        ]
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fxd-bench-lambda-") as name:
        print(render_lambda(measure_lambda_turns(Path(name))))
