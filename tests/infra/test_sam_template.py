"""``infra/template.yaml``: cfn-lint passes on it, and it gives each Lambda function what the
code reads (environment variables, handler paths) and nothing more (IAM on its own table,
bucket, queue and secrets only). The template is read with cfn-lint's own decoder, which
understands ``!Ref``/``!Sub``/``!GetAtt``."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fxdurable.queues.sqs import parse_sqs_url
from fxdurable.stores._ddb_settings import parse_url as parse_dynamodb_url
from tests.layering import PACKAGE, imported_modules

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "infra" / "template.yaml"
FUNCTIONS = ("HttpFunction", "WakeFunction", "ScanFunction")

# FXD_* variables the functions' code reads that the template leaves to their defaults, and
# why. A variable the code starts reading must be set by the template or listed here.
LEFT_TO_DEFAULTS = {
    "FXD_CRASH_AT": "tests only: crash injection",
    "FXD_OTEL": "tracing is opt-in",
    "FXD_HTTP_DEV": "never on a deployment: no authentication",
    "FXD_HTTP_TOKENS": "a secret: loaded from SSM (FXD_SECRETS_SSM_PATH)",
    "FXD_HTTP_TOKENS_FILE": "no files on Lambda: FXD_HTTP_TOKENS from SSM instead",
    "FXD_HTTP_MODE": "the Lambda adapter forces receipt mode",
    "FXD_HTTP_IDLE_TIMEOUT_S": "streaming only",
    "FXD_HTTP_MAX_BODY_BYTES": "the default fits API Gateway's payload limit",
    "FXD_HTTP_BODY_TIMEOUT_S": "API Gateway delivers the body whole",
    "FXD_WAKE_SECRET": "POST /wake is off: SQS delivers the wakes",
    "FXD_WAKE_BUDGET_S": "POST /wake is off",
    "FXD_PROMPT_CACHE": "prompt caching is on unless a deployment opts out",
    "FXD_INVOCATION_BUDGET_S": "the HTTP function runs no turn",
    "FXD_LEASE_TTL_S": "the defaults (15 s TTL, 5 s heartbeat) fit",
    "FXD_HEARTBEAT_S": "the defaults fit",
    "FXD_LEASE_MARGIN_S": "the default (half a heartbeat) fits",
    "FXD_APP_DIR": "the agents package is in the artifact's root, /var/task, on the path already",
    "FXD_SCAN_INTERVAL_S": "the schedule is the interval",
    "FXD_SCAN_QUIET_S": "read by every function's WorkerSettings; only the scan's matters",
    "FXD_LAMBDA_MARGIN_S": "read by the shared config; only the wake function's matters",
    "FXD_OPENAI_BASE_URL": "the provider's own endpoint unless a gateway is set",
    "FXD_ANTHROPIC_BASE_URL": "the provider's own endpoint unless a gateway is set",
}
# Set by the template for the application's agents module, not read by fxdurable.
FOR_THE_APPLICATION = {"FXD_MODEL"}
ENTRY_MODULES = {
    "HttpFunction": "fxdurable/aws_lambda/http.py",
    "WakeFunction": "fxdurable/aws_lambda/wake.py",
    "ScanFunction": "fxdurable/aws_lambda/scan.py",
}
# What each function may touch (logical ids; "secrets:<suffix>" an SSM path).
ALLOWED_RESOURCES = {
    "HttpFunction": {"Table", "Bucket", "WakeQueue", "secrets:/http"},
    "WakeFunction": {"Table", "Bucket", "WakeQueue", "secrets:/model"},
    "ScanFunction": {"Table", "Bucket", "WakeQueue"},
}
_ENV_NAME = re.compile(r"FXD_[A-Z0-9_]+")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    from cfnlint.decode import decode

    decoded, problems = decode(str(TEMPLATE))
    assert not problems and decoded is not None, problems
    return decoded


def _function(template: dict[str, Any], name: str) -> dict[str, Any]:
    props: dict[str, Any] = template["Resources"][name]["Properties"]
    return props


def _environment(template: dict[str, Any], name: str) -> dict[str, Any]:
    shared = template["Globals"]["Function"]["Environment"]["Variables"]
    own = _function(template, name).get("Environment", {}).get("Variables", {})
    return {**shared, **own}


def _read_by(entry: str) -> set[str]:
    """The FXD_* names written as string constants in ``entry`` and every fxdurable module
    it imports, however indirectly (read from source, not by importing)."""
    seen: set[Path] = set()
    todo = [REPO / entry]
    names: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        names |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _ENV_NAME.fullmatch(node.value)
        }
        for _line, module in imported_modules(tree, path):
            if module.startswith("fxdurable"):
                base = PACKAGE.parent / module.replace(".", "/")
                todo += [base.with_suffix(".py"), base / "__init__.py"]
    return names


def _cfn_lint() -> str:
    found = shutil.which("cfn-lint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("cfn-lint is not installed: pip install -e '.[test]'")
    return found


def test_cfn_lint_passes_on_the_template_and_fails_on_a_broken_one(tmp_path: Path) -> None:
    lint = _cfn_lint()
    done = subprocess.run([lint, str(TEMPLATE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # The linter is live: the same template with an out-of-range timeout is refused.
    broken = tmp_path / "template.yaml"
    broken.write_text(
        TEMPLATE.read_text().replace("VisibilityTimeout: 1800", "VisibilityTimeout: 99999")
    )
    refused = subprocess.run([lint, str(broken)], capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "E3034" in refused.stdout, refused.stdout


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_gets_every_variable_its_code_reads(
    template: dict[str, Any], name: str
) -> None:
    read = _read_by(ENTRY_MODULES[name])
    set_here = set(_environment(template, name))
    assert {"FXD_STORE", "FXD_QUEUE"} <= read  # the scan above sees through the imports
    missing = read - set_here - set(LEFT_TO_DEFAULTS)
    assert not missing, f"{name} reads {sorted(missing)}, which the template does not set"
    unread = set_here - read - FOR_THE_APPLICATION
    assert not unread, f"the template sets {sorted(unread)} for {name}, which it never reads"


def test_the_functions_that_run_agents_are_told_where_they_are(template: dict[str, Any]) -> None:
    for name in ("HttpFunction", "WakeFunction"):
        env = _environment(template, name)
        assert env["FXD_AGENTS"] == {"Ref": "AgentsImport"}
        assert env["FXD_MODEL"] == {"Ref": "Model"}
    assert "FXD_AGENTS" not in _environment(template, "ScanFunction")


def test_the_store_and_queue_urls_are_the_ones_the_adapters_parse(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    store = env["FXD_STORE"]["Fn::Sub"]
    assert store == "dynamodb://${Table}?region=${AWS::Region}&bucket=${Bucket}"
    # A stack's names (!Ref of a table is its name, of a bucket its name) parse as the store's.
    for name, value in (
        ("Table", "fxd-Table-1A2B"),
        ("AWS::Region", "eu-west-1"),
        ("Bucket", "fxd-b1"),
    ):
        store = store.replace("${" + name + "}", value)
    dynamo = parse_dynamodb_url(store)
    assert (dynamo.table, dynamo.region, dynamo.bucket) == ("fxd-Table-1A2B", "eu-west-1", "fxd-b1")
    assert dynamo.s3_prefix == "fxd-blobs"  # what the IAM statements and lifecycle rule name
    queue = env["FXD_QUEUE"]["Fn::Sub"]
    # !Ref of an SQS queue is its URL.
    url = queue.replace("${WakeQueue}", "https://sqs.eu-west-1.amazonaws.com/123456789012/q")
    settings = parse_sqs_url(url)
    assert (settings.name, settings.region) == ("q", "eu-west-1")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_handler_path_names_a_real_function(template: dict[str, Any], name: str) -> None:
    module, _, attribute = _function(template, name)["Handler"].rpartition(".")
    handler = getattr(importlib.import_module(module.replace("/", ".")), attribute)
    assert callable(handler)


def _referenced(resource: Any) -> set[str]:
    """Logical ids (or ``secrets:<suffix>``) a policy statement's Resource names."""
    items = resource if isinstance(resource, list) else [resource]
    found: set[str] = set()
    for item in items:
        assert isinstance(item, dict), f"a literal resource {item!r}: name it by reference"
        if "Fn::GetAtt" in item:
            found.add(item["Fn::GetAtt"][0].split(".")[0])
        elif "Fn::Sub" in item:
            text = item["Fn::Sub"]
            if text == "${Bucket.Arn}/fxd-blobs/*":  # the store's objects (its S3 prefix)
                found.add("Bucket")
            else:
                match = re.fullmatch(
                    r"arn:\$\{AWS::Partition\}:ssm:\$\{AWS::Region\}:\$\{AWS::AccountId\}:"
                    r"parameter\$\{SecretsPath\}(/[a-z]+)",
                    text,
                )
                assert match, f"an unexpected resource {text!r}"
                found.add(f"secrets:{match[1]}")
        else:
            raise AssertionError(f"an unexpected resource {item!r}")
    return found


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_role_reaches_only_its_own_resources(template: dict[str, Any], name: str) -> None:
    (policy,) = _function(template, name)["Policies"]
    reached: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert all("*" not in a for a in actions), actions
        reached |= _referenced(statement["Resource"])
    assert reached == ALLOWED_RESOURCES[name]


def _actions(template: dict[str, Any], name: str, prefix: str) -> set[str]:
    (policy,) = _function(template, name)["Policies"]
    found: set[str] = set()
    for statement in policy["Statement"]:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        found |= {a for a in actions if a.startswith(prefix)}
    return found


def test_only_the_wake_function_consumes_the_queue(template: dict[str, Any]) -> None:
    consume = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}
    assert consume <= _actions(template, "WakeFunction", "sqs:")
    assert not consume & _actions(template, "HttpFunction", "sqs:")
    assert not consume & _actions(template, "ScanFunction", "sqs:")
    assert not {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"} & _actions(
        template, "ScanFunction", "dynamodb:"
    )  # the scan only reads the store


def test_the_http_function_may_erase_a_sessions_objects_and_only_it(
    template: dict[str, Any],
) -> None:
    """``DELETE /sessions/{id}`` deletes the session's S3 objects, listing its folder first
    (fxdurable/stores/_ddb_blobs.py): without these actions an erase on AWS is AccessDenied
    (moto does not check IAM, so only the template can tell)."""
    assert {"s3:DeleteObject", "s3:ListBucket"} <= _actions(template, "HttpFunction", "s3:")
    (policy,) = _function(template, "HttpFunction")["Policies"]
    (listing,) = [s for s in policy["Statement"] if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": "fxd-blobs/*"}}
    for name in ("WakeFunction", "ScanFunction"):
        assert not {"s3:DeleteObject", "s3:ListBucket"} & _actions(template, name, "s3:")


def test_the_queue_outlasts_a_killed_invocation_and_reports_partial_failures(
    template: dict[str, Any],
) -> None:
    resources = template["Resources"]
    queue = resources["WakeQueue"]["Properties"]
    wake = _function(template, "WakeFunction")
    assert queue["VisibilityTimeout"] >= 6 * wake["Timeout"]
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["WakeDeadLetterQueue", "Arn"]
    }
    (event,) = wake["Events"].values()
    assert event["Type"] == "SQS"
    assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert event["Properties"]["ScalingConfig"]["MaximumConcurrency"] == {
        "Ref": "WakeMaxConcurrency"
    }
    http = _function(template, "HttpFunction")
    long_poll = float(http["Environment"]["Variables"]["FXD_HTTP_LONG_POLL_S"])
    assert long_poll < http["Timeout"] <= 30  # answers before API Gateway's cut-off


def test_the_table_and_bucket_are_the_stores_shape_and_locked_down(
    template: dict[str, Any],
) -> None:
    table = template["Resources"]["Table"]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]] == [
        ("pk", "HASH"),
        ("sk", "RANGE"),
    ]
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    bucket = template["Resources"]["Bucket"]["Properties"]
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    rules = {rule["Id"]: rule for rule in bucket["LifecycleConfiguration"]["Rules"]}
    expiry = rules["payloads-past-session-retention"]
    assert expiry["Prefix"] == "fxd-blobs/" and expiry["ExpirationInDays"] == {
        "Ref": "SessionRetentionDays"
    }
    assert rules["incomplete-uploads"]["AbortIncompleteMultipartUpload"]


def test_no_secret_is_written_into_the_template(template: dict[str, Any]) -> None:
    for name in FUNCTIONS:
        for variable in _environment(template, name):
            # The one SECRET allowed is the path naming where SSM keeps them.
            assert not re.search(r"KEY|TOKEN|PASSWORD|SECRET(?!S_SSM_PATH$)", variable), variable
    assert "resolve:" not in TEMPLATE.read_text()  # not even a dynamic reference into env
