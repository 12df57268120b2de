"""``fxdurable scan --queue sqs://…``: an operator's "wake everything now" on AWS, from any
machine (the Lambda deployment's own scan is a scheduled function; a worker scans by itself).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from aws_support import REGION, aws_environment, aws_session
from dynamo_support import dynamo_url

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.stores.dynamodb import DynamoStore


def test_a_scan_wakes_admitted_work_whose_wake_was_never_sent_onto_sqs(
    tmp_path: Path, moto_server: str, serial_moto_server: str
) -> None:
    sqs: Any = aws_session().client("sqs", endpoint_url=moto_server)
    queue_url = sqs.create_queue(QueueName=f"scan-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    store_url = dynamo_url(serial_moto_server)
    store = DynamoStore(store_url, create=True, session=aws_session())
    try:  # admitted, and the submitter died before sending its wake
        Journal(store, SystemClock(), RandomIds()).admit("ops-1", agent="demo", prompt="hi")
    finally:
        store.close()

    def scan() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fxdurable", "scan", "--store", store_url,
             "--queue", f"sqs://{queue_url}?region={REGION}", "--agents", "x.y:agents"],
            env=aws_environment(tmp_path) | {"PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = scan()
    assert (done.returncode, done.stdout) == (0, "woke 1 session(s)\n"), done.stderr
    got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["session"] for m in got] == ["ops-1"]
    sqs.close()
