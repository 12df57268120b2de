"""A user's Lambda project built by the real ``sam build``, outside the repository.

The SAM CLI (pinned) is installed from the package index into a venv cached in
``~/.cache/fxdurable-tests/`` (once per machine and version), fxdurable from the built wheel
into a throwaway one; ``fxdurable init lambda`` writes the
project into an empty directory, where a developer's local state is dropped too (stores with
conversations, workspaces, tests, a ``.env``). ``make build`` (the project's own Makefile:
``fxdurable stage lambda``, ``sam build``, ``compileall``) must ship fxdurable, the agents and
their dependencies only; and each handler, imported from inside its built artifact by a fresh
``python3.12`` that sees nothing else (the artifact, then boto3 as the Lambda runtime has it),
must answer an event against the moto server.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_support import REGION, aws_session
from lambda_support import answer_json, answer_lines, api_event, sqs_event
from wheel_support import REPO, Venv, clean_env, make_venv, run, wheel_venv

pytestmark = [pytest.mark.slow, pytest.mark.aws, pytest.mark.timeout(1800)]

FUNCTIONS = ("HttpFunction", "WakeFunction", "ScanFunction")
HANDLERS = {
    "HttpFunction": "fxdurable.aws_lambda.http",
    "WakeFunction": "fxdurable.aws_lambda.wake",
    "ScanFunction": "fxdurable.aws_lambda.scan",
}
# What a developer's project directory holds besides the code; none of it may ship. The
# marker is in every one of these files, and must be in no file of an artifact.
LEAK = f"leak-marker-{uuid.uuid4().hex}"
STRAYS = (
    ".fxd/fxd.db",
    ".fxd-demo/deployments.log",
    ".fxd-coding/workspace/notes.txt",
    "tests/test_agents.py",
    ".venv/lib/site.py",
    ".env",
    "myapp/.fxd/fxd.db",
    "myapp/local.db",
    "myapp/local.db-wal",
    "myapp/tests/test_tools.py",
    "myapp/.env",
    "myapp/run.log",
)
MAX_MB = 15.0
# The SAM CLI the builds run (pinned: its venv is cached by this version, see
# _sam_and_runtime); 1.170.0 was the index's newest when it was pinned.
SAM_CLI = "aws-sam-cli==1.170.0"
TOKEN = "alice-token-0123456789"


@dataclass(frozen=True)
class Tools:
    sam: Path
    python312: Path  # a real interpreter, not a shim
    runtime: Path  # boto3 and botocore, as the Lambda runtime provides them
    fxdurable: Path  # the wheel's command, in a venv of its own


_tools: list[Tools] = []


def _python312() -> Path:
    """A python3.12 that runs. pyenv's shim runs one only when a 3.12 is selected, so each
    3.12 pyenv knows is tried too."""
    attempts: list[dict[str, str]] = [{}]
    if shutil.which("pyenv"):
        bare = subprocess.run(
            ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False
        ).stdout.split()
        attempts += [{"PYENV_VERSION": v} for v in bare if v.startswith("3.12")]
    for extra in attempts:
        done = subprocess.run(
            ["python3.12", "-c", "import sys; print(sys.executable)"],
            env={**clean_env(), **extra},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return Path(done.stdout.strip())
    pytest.fail("python3.12 is needed (the functions' runtime): pyenv install 3.12")


def _sam_and_runtime() -> tuple[Venv, Path]:
    """The SAM CLI's venv and the runtime's boto3, made once per machine in the user's cache
    (``~/.cache/fxdurable-tests/``, keyed by the pinned SAM CLI and this Python) and reused by
    every run after: installing aws-sam-cli from the index is most of this file's first
    minute. A venv is not relocatable, so it is made where it stays, under a lock (two test
    processes may ask at once); ``complete`` is written last, so a run killed half-way leaves a
    directory the next one replaces. Delete the directory to install afresh."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fxdurable-tests"
    key = f"{SAM_CLI.replace('==', '-')}-py{sys.version_info.major}.{sys.version_info.minor}"
    root = cache / key
    sam_venv, runtime = Venv(root / "sam"), root / "lambda-runtime"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "complete").exists() or not sam_venv.exe("sam").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            make_venv(sam_venv.root, SAM_CLI)
            run(
                [str(sam_venv.python), "-m", "pip", "install", "-q",
                 "--disable-pip-version-check", "--target", str(runtime), "boto3"],
                cwd=root, timeout=300, what="boto3 for the runtime",
            )  # fmt: skip
            (root / "complete").write_text(f"{SAM_CLI}\n")
    return sam_venv, runtime


def tools() -> Tools:
    if not _tools:
        sam_venv, runtime = _sam_and_runtime()
        _tools.append(
            Tools(
                sam=sam_venv.exe("sam"),
                python312=_python312(),
                runtime=runtime,
                fxdurable=wheel_venv().exe("fxdurable"),
            )
        )
    return _tools[0]


def _build_env(t: Tools) -> dict[str, str]:
    path = os.pathsep.join([str(t.python312.parent), os.environ.get("PATH", "")])
    return clean_env(PATH=path, SAM_CLI_TELEMETRY="0")


def scaffolded_project(directory: Path, t: Tools) -> Path:
    """``fxdurable init lambda`` into an empty directory, then a developer's local state."""
    project = directory / "project"
    run([str(t.fxdurable), "init", "lambda", str(project)], cwd=directory, timeout=60,
        what="fxdurable init lambda")  # fmt: skip
    for stray in STRAYS:
        path = project / stray
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"conversation: {LEAK}\n")
    return project


def make_build(project: Path, t: Tools, *sam_flags: str) -> str:
    command = ["make", "build", f"SAM={t.sam}", f"FXDURABLE={t.fxdurable}"]
    if sam_flags:
        command.append(f"SAM_BUILD_FLAGS={' '.join(sam_flags)}")
    return run(command, cwd=project, timeout=900, what="make build", env=_build_env(t))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _zipped_size(root: Path) -> int:
    """What ``sam deploy`` uploads: the directory as a deflated zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in _files(root):
            archive.write(path, path.relative_to(root))
    return len(buffer.getvalue())


def _installed_by_pip(artifact: Path) -> set[str]:
    """Top-level names the artifact's dist-infos (pip's installs) account for."""
    names: set[str] = set()
    for record in artifact.glob("*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            first = line.split(",", 1)[0].split("/", 1)[0]
            if first and first != "..":
                names.add(first)
    return names


@pytest.fixture(scope="module")
def x86_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project built for x86_64, the processor these tests run on: its handlers can run
    here (the template's default, arm64, has compiled code for Graviton)."""
    t = tools()
    project = scaffolded_project(tmp_path_factory.mktemp("x86"), t)
    make_build(project, t, "--parameter-overrides", "Architecture=x86_64")
    return project


def test_the_artifact_holds_fxdurable_the_agents_and_their_dependencies_only(
    tmp_path: Path,
) -> None:
    t = tools()
    project = scaffolded_project(tmp_path, t)
    output = make_build(project, t)  # the template's default: arm64
    assert "left out:" in output and "myapp/.fxd" in output  # the stage says what it dropped
    build = project / ".aws-sam" / "build"
    sizes = {}
    for function in FUNCTIONS:
        artifact = build / function
        top = {p.name for p in artifact.iterdir()}
        ours = {"fxdurable", "fxdurable-0.1.0.dist-info", "myapp", "requirements.txt"}
        assert ours <= top, top
        # Everything else was installed by pip from requirements.txt (or is the bytecode of
        # a top-level module): nothing came from the project directory but myapp/.
        others = top - ours - _installed_by_pip(artifact) - {"__pycache__"}
        assert not others, f"{function} ships {sorted(others)}"
        assert not {"boto3", "botocore"} & top  # the runtime's
        assert {"pydantic_core", "mangum", "starlette"} <= top
        assert any(artifact.glob("pydantic_core/*aarch64*.so"))  # built for arm64
        assert sorted(p.name for p in (artifact / "myapp").iterdir() if p.suffix == ".py") == [
            "__init__.py",
            "agents.py",
        ]
        assert {p.name for p in (artifact / "myapp").iterdir()} <= {
            "__init__.py",
            "agents.py",
            "__pycache__",
        }
        for path in _files(artifact):
            relative = path.relative_to(artifact)
            assert not any(part.startswith(".fxd") for part in relative.parts), relative
            assert not path.name.endswith((".db", ".db-wal", ".env")), relative
            assert LEAK.encode() not in path.read_bytes(), f"{relative} holds local state"
        # Bytecode for the runtime's Python, so no cold start compiles the modules.
        assert any(artifact.glob("fxdurable/__pycache__/__init__.cpython-312.pyc"))
        files = _files(artifact)
        sizes[function] = (
            sum(p.stat().st_size for p in files if "__pycache__" not in p.parts),
            sum(p.stat().st_size for p in files),
            _zipped_size(artifact),
        )
    report = {f: tuple(round(n / 1e6, 1) for n in s) for f, s in sizes.items()}
    print(f"artifact MB (files, with bytecode, zipped): {report}")
    for function, (source, _with_bytecode, zipped) in sizes.items():
        assert source <= MAX_MB * 1e6, f"{function}: {source / 1e6:.1f} MB of files"
        assert zipped <= MAX_MB * 1e6, f"{function}: {zipped / 1e6:.1f} MB zipped"


# -- the handlers, from inside their artifacts ------------------------------------------------

DRIVER = """
import importlib, json, sys, time
artifact, runtime, module, event_path = sys.argv[1:5]
sys.path[:0] = [artifact, runtime]  # /var/task, then the runtime's boto3, as on Lambda


class Context:
    def __init__(self, seconds):
        self.ends = time.monotonic() + seconds

    def get_remaining_time_in_millis(self):
        return int((self.ends - time.monotonic()) * 1000)


with open(event_path) as f:
    event = json.load(f)
answer = importlib.import_module(module).handler(event, Context(60))
stdlib = (sys.base_prefix, sys.base_exec_prefix)
outside = sorted(
    name for name, m in list(sys.modules.items())
    if getattr(m, "__file__", None) and m.__file__ != __file__  # this driver
    and not m.__file__.startswith((artifact, runtime, *stdlib))
)
print(json.dumps({"answer": answer, "outside": outside,
                  "fxdurable": sys.modules["fxdurable"].__file__}))
"""


@dataclass
class AwsWorld:
    env: dict[str, str]
    queue_url: str
    sqs: Any


@pytest.fixture
def aws_world(moto_server: str, serial_moto_server: str, tmp_path: Path) -> AwsWorld:
    """What the template creates (table, bucket, queue) on the moto servers, and the
    environment it gives the functions. The table and bucket are on the serial server (a
    turn's heartbeat and its commits are concurrent transactions, which the threaded one does
    not isolate: tests/conftest.py), the queue on the threaded one (long polls)."""
    session = aws_session()
    name = f"fxd-sam-{uuid.uuid4().hex[:12]}"
    store_endpoint = serial_moto_server
    dynamodb = session.client("dynamodb", endpoint_url=store_endpoint)
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
    )
    session.client("s3", endpoint_url=store_endpoint).create_bucket(Bucket=name)
    sqs = session.client("sqs", endpoint_url=moto_server)
    queue_url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_LAMBDA_FUNCTION_NAME": "test",
        "FXD_STORE": f"dynamodb://{name}?region={REGION}&endpoint_url={store_endpoint}"
        f"&bucket={name}",
        "FXD_QUEUE": f"sqs://{queue_url}?region={REGION}",
        "FXD_AGENTS": "myapp.agents:agents",
        "FXD_MODEL": "scripted",
        "FXD_HTTP_TOKENS": f"alice={TOKEN}",
        "FXD_HTTP_LONG_POLL_S": "1",
        "FXD_LAMBDA_MARGIN_S": "5",
        "FXD_SCAN_QUIET_S": "0",
    }
    return AwsWorld(env, queue_url, sqs)


def invoke(project: Path, function: str, event: dict[str, Any], world: AwsWorld,
           scratch: Path) -> Any:  # fmt: skip
    """One cold start: a fresh python3.12, isolated (-I), in an empty directory, with only
    the function's artifact and the runtime's boto3 on its path."""
    t = tools()
    scratch.mkdir(exist_ok=True)
    driver = scratch / "driver.py"
    driver.write_text(DRIVER)
    event_path = scratch / f"{function}-{uuid.uuid4().hex[:6]}.json"
    event_path.write_text(json.dumps(event))
    empty = scratch / "cwd"
    empty.mkdir(exist_ok=True)
    artifact = project / ".aws-sam" / "build" / function
    out = run(
        [str(t.python312), "-I", str(driver), str(artifact), str(t.runtime),
         HANDLERS[function], str(event_path)],
        cwd=empty, timeout=120, what=f"{function}'s handler",
        env={**world.env, "LAMBDA_TASK_ROOT": str(artifact)},  # /var/task on Lambda
    )  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    assert result["outside"] == [], f"{function} imported from outside: {result['outside']}"
    assert result["fxdurable"].startswith(str(artifact))
    return result["answer"]


def _receive(world: AwsWorld) -> list[dict[str, Any]]:
    answer = world.sqs.receive_message(
        QueueUrl=world.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
        AttributeNames=["All"],
    )  # fmt: skip
    return list(answer.get("Messages", []))


def test_each_handler_answers_an_event_from_inside_its_built_artifact(
    x86_project: Path, aws_world: AwsWorld, tmp_path: Path
) -> None:
    # HTTP: POST /chat admits and enqueues one wake, answering 202 with a receipt.
    post = api_event("POST", "/chat", token=TOKEN,
                     body={"prompt": "Is eu up?", "agent": "ops", "sessionId": "s1"})  # fmt: skip
    answer = invoke(x86_project, "HttpFunction", post, aws_world, tmp_path)
    assert answer["statusCode"] == 202, answer
    receipt = answer_json(answer)
    # Scan: the admitted session has work and no lease, so the scan wakes it too.
    assert invoke(x86_project, "ScanFunction", {"source": "aws.events"}, aws_world, tmp_path) == {
        "orphaned": 1,
        "woken": 1,
        "expired": 0,
    }
    # Wake: both wakes in one batch; the session's turn runs to rest (the tool, the reply).
    messages = _receive(aws_world)
    assert len(messages) == 2, messages
    answer = invoke(x86_project, "WakeFunction", sqs_event(messages), aws_world, tmp_path)
    assert answer == {"batchItemFailures": []}
    # HTTP again: the turn's lines from the receipt's cursor, the model's reply among them.
    poll = api_event("GET", "/chat", token=TOKEN,
                     query={"sessionId": "s1", "cursor": str(receipt["cursor"])})  # fmt: skip
    lines = answer_lines(invoke(x86_project, "HttpFunction", poll, aws_world, tmp_path))
    assert lines[-1]["type"] == "turn_end" and lines[-1]["data"]["outcome"] == "completed"
    assert "eu is ok." in json.dumps(lines)
    assert "read_region" in json.dumps(lines)


def test_sam_validate_lint_passes_on_the_scaffold_and_infra_templates(tmp_path: Path) -> None:
    t = tools()
    project = tmp_path / "project"
    run([str(t.fxdurable), "init", "lambda", str(project)], cwd=tmp_path, timeout=60,
        what="fxdurable init lambda")  # fmt: skip
    env = _build_env(t) | {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        (project / "template.yaml")
        .read_text()
        .replace("VisibilityTimeout: 1800", "VisibilityTimeout: 99999")
    )
    for template in (project / "template.yaml", REPO / "infra" / "template.yaml"):
        out = run([str(t.sam), "validate", "--lint", "--template", str(template),
                   "--region", REGION], cwd=tmp_path, timeout=180, what="sam validate --lint",
                  env=env)  # fmt: skip
        assert "is a valid SAM Template" in out
    # The lint is live: an out-of-range visibility timeout is refused.
    refused = subprocess.run(
        [str(t.sam), "validate", "--lint", "--template", str(broken), "--region", REGION],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert refused.returncode != 0, refused.stdout + refused.stderr
