"""Lambda's SQS poller in miniature, around the real wake handler (``handlers.wake_lambda``).

``python wake_driver.py SESSION_KEY REMAINING_S``, configured by the environment the template
sets (``lambda_support.LambdaWorld.subprocess_env``). It receives up to ten messages from the
queue (long polls of 1 s), hands them to the handler as one SQS event with a fresh context
whose remaining time is ``REMAINING_S``, deletes the records the answer does not report
failed, as the poller does, and prints one JSON line per invocation. It stops once the
session is at rest; a SIGKILL stops it anywhere, like Lambda at a timeout.
"""

from __future__ import annotations

import json
import os
import sys
import time

import boto3
from lambda_support import FakeContext, handled, sqs_event

from fxdurable.backends import open_store
from handlers.wake_lambda import handler

STOP_AFTER_S = 90.0


def at_rest(store_url: str, session_key: str) -> bool:
    store = open_store(store_url)
    try:
        return store.read(
            lambda v: (
                v.get_session(session_key) is not None and not v.unsettled_submissions(session_key)
            )
        )
    finally:
        store.close()


def main(session_key: str, remaining_s: float) -> int:
    queue_url = os.environ["FXD_QUEUE"].removeprefix("sqs://").split("?")[0]
    sqs = boto3.client("sqs", endpoint_url=queue_url.rsplit("/", 2)[0])
    invocations = 0
    stop_at = time.monotonic() + STOP_AFTER_S
    while not at_rest(os.environ["FXD_STORE"], session_key):
        if time.monotonic() > stop_at:
            print(json.dumps({"gave_up": True}), flush=True)
            return 1
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            continue
        invocations += 1
        context = FakeContext(remaining_s)
        answer = handler(sqs_event(messages), context)
        for message in handled(messages, answer):
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        line = {
            "invocation": invocations,
            "records": len(messages),
            "receive_counts": [int(m["Attributes"]["ApproximateReceiveCount"]) for m in messages],
            "failed": len(answer["batchItemFailures"]),
            "left_ms": context.get_remaining_time_in_millis(),
        }
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
