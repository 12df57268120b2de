"""Cold start of each Lambda handler: ``python -m bench.lambda_cold_start``.

Each case runs in a fresh interpreter that times itself (``perf_counter`` around the work, so
the interpreter's own start is left out) after one untimed warm-up round that caches the
bytecode, as a deployment package does:

* ``import handlers.X_lambda``: what Lambda's init phase pays;
* ``+ first invocation's build``: the import plus the function's state made from the
  environment (store, SQS client, agents, app), what the first invocation pays on top (no
  request is handled: the queue is not reached);
* the SQS batch utilities: ``fxdurable.aws_lambda.batch`` (ours) beside
  ``aws_lambda_powertools.utilities.batch`` (when installed), the choice
  :mod:`fxdurable.aws_lambda.batch` explains, each on top of what the wake function imports
  anyway (the runtime's wake handler and the SQS queue with boto3, imported untimed first).

Medians of ``--reps`` (5) with min-max. Wall times on a shared 2-core machine: compare rows of
one run, not runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = {
    "http": "from fxdurable.aws_lambda.http import HttpFunction as F",
    "wake": "from fxdurable.aws_lambda.wake import WakeFunction as F",
    "scan": "from fxdurable.aws_lambda.scan import ScanFunction as F",
}


# What the wake function imports whichever batch utility it uses: the batch rows add to it.
WAKE_BASE = "import fxdurable.runtime.worker, fxdurable.queues.sqs"


def _cases() -> dict[str, str | tuple[str, str]]:
    cases: dict[str, str | tuple[str, str]] = {}
    for name, build in BUILD.items():
        cases[f"import handlers.{name}_lambda"] = f"import handlers.{name}_lambda"
        cases[f"  + first invocation's build ({name})"] = (
            f"import handlers.{name}_lambda\n{build}\nF.from_env()"
        )
    cases["SQS batch: fxdurable.aws_lambda.batch"] = (
        WAKE_BASE,
        "import fxdurable.aws_lambda.batch",
    )
    if importlib.util.find_spec("aws_lambda_powertools") is not None:
        cases["SQS batch: aws_lambda_powertools.utilities.batch"] = (
            WAKE_BASE,
            "import aws_lambda_powertools.utilities.batch",
        )
    return cases


def _timed(case: str | tuple[str, str]) -> str:
    """The program that prints how long ``case``'s code took (after its untimed preamble)."""
    preamble, code = case if isinstance(case, tuple) else ("", case)
    body = "\n".join("    " + line for line in code.splitlines())
    return (
        f"{preamble}\nimport time\nt = time.perf_counter()\nif True:\n{body}\n"
        "print(time.perf_counter() - t)"
    )


def _env(tmp: Path) -> dict[str, str]:
    # Bytecode is cached (in the bench's own directory) even where the caller's environment
    # says not to write it: a package deployed with its .pyc files is what is measured.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FXD_", "AWS_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONPYCACHEPREFIX=str(tmp / "pycache"),
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        FXD_STORE=f"sqlite:///{tmp}/cold.db",
        FXD_QUEUE="sqs://http://127.0.0.1:9/123456789012/cold?region=us-east-1",
        FXD_AGENTS="fxdurable.cli.demo_agent:agents",
        FXD_DEMO_DIR=str(tmp / "demo"),
        FXD_HTTP_TOKENS="bench=bench-token-0123456789",
    )
    return env


# Lambda cannot write __pycache__ (its code directory is read-only) and `sam build` ships no
# .pyc files: without compiling them into the package, every cold start compiles from source.
UNCOMPILED = "import handlers.wake_lambda, without .pyc files (compiled at each start)"


def measure(reps: int) -> dict[str, list[float]]:
    cases = _cases()
    samples: dict[str, list[float]] = {name: [] for name in [*cases, UNCOMPILED]}
    with tempfile.TemporaryDirectory(prefix="fxd-cold-") as name:
        env = _env(Path(name))
        uncompiled = {
            **env,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPYCACHEPREFIX": str(Path(name) / "empty"),
        }
        for round_ in range(reps + 1):  # round 0 warms the bytecode cache
            runs = [(case, code, env) for case, code in cases.items()]
            runs.append((UNCOMPILED, "import handlers.wake_lambda", uncompiled))
            for case, code, case_env in runs:
                out = subprocess.run(
                    [sys.executable, "-c", _timed(code)],
                    cwd=REPO, env=case_env, capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                if round_:
                    samples[case].append(float(out.split()[-1]))
    return samples


def render(samples: dict[str, list[float]]) -> str:
    rows = ["| case | median | min–max |", "|---|---|---|"]
    for case, values in samples.items():
        median = statistics.median(values) * 1000
        rows.append(
            f"| {case} | {median:.0f} ms | {min(values) * 1000:.0f}–{max(values) * 1000:.0f} ms |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.lambda_cold_start")
    parser.add_argument("--reps", type=int, default=5)
    print(render(measure(parser.parse_args().reps)))
