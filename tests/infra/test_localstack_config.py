"""``localstack/``: the compose file and the init script are well formed, and the script
creates what ``infra/template.yaml`` declares. (LocalStack itself needs Docker, which CI does
not have: ``make localstack-test`` runs the AWS tests against it where Docker is.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LOCALSTACK = REPO / "localstack"
INIT_SCRIPTS = sorted((LOCALSTACK / "init" / "ready.d").glob("*.sh"))


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    from cfnlint.decode import decode

    decoded, problems = decode(str(REPO / "infra" / "template.yaml"))
    assert not problems and decoded is not None
    return decoded


def _script() -> str:
    return "\n".join(path.read_text() for path in INIT_SCRIPTS)


def _setting(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)$", _script(), re.MULTILINE)
    assert match, f"the init script sets no {name}"
    return match[1]


def test_the_compose_file_runs_the_services_with_the_init_scripts_mounted() -> None:
    compose = yaml.safe_load((LOCALSTACK / "docker-compose.yml").read_text())
    service = compose["services"]["localstack"]
    image, _, tag = service["image"].partition(":")
    assert image == "localstack/localstack" and tag and tag != "latest"  # pinned
    assert {"sqs", "dynamodb", "s3"} <= set(service["environment"]["SERVICES"].split(","))
    assert "./init/ready.d:/etc/localstack/init/ready.d:ro" in service["volumes"]
    assert service["healthcheck"]["test"]  # what `docker compose up --wait` waits for
    assert "127.0.0.1:4566:4566" in service["ports"]  # loopback only


@pytest.mark.parametrize("script", INIT_SCRIPTS, ids=lambda p: p.name)
def test_each_init_script_is_valid_bash(script: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert script.stat().st_mode & 0o111, f"{script.name} is not executable"


def test_the_init_script_creates_what_the_template_declares(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    queue = resources["WakeQueue"]["Properties"]
    assert int(_setting("VISIBILITY_TIMEOUT_S")) == queue["VisibilityTimeout"]
    assert int(_setting("MAX_RECEIVE_COUNT")) == queue["RedrivePolicy"]["maxReceiveCount"]
    script = _script()
    table = resources["Table"]["Properties"]
    for key in table["KeySchema"]:
        assert f"AttributeName={key['AttributeName']},KeyType={key['KeyType']}" in script
    assert f"--billing-mode {table['BillingMode']}" in script
    assert "PointInTimeRecoveryEnabled=true" in script
    assert "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true" in script
    assert '"SSEAlgorithm":"AES256"' in script
