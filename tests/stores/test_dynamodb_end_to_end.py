"""The DynamoDB store end to end: a real multi-step turn through the Runtime (scripted model,
a tool, records in S3), then ``fxdurable check`` and ``fxdurable trace`` on the same table
as a user runs them (a subprocess, credentials from the environment)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
from aws_support import aws_environment, aws_session
from dynamo_support import dynamo_url

from bench.runtime_turns import SETTINGS
from fxdurable import Agent, Runtime, ScriptedModel, ToolContext, call, reply
from fxdurable.runtime.tools import define_tool
from fxdurable.stores._ddb_settings import parse_url
from fxdurable.stores.dynamodb import DynamoStore
from tests.stores.test_redis_store import violations

pytestmark = pytest.mark.aws

ANSWER = "Both files are read."
BIG = "0123456789abcdef" * 8192  # 128 KB: past the offload threshold of the URL below


class ReadInput(pydantic.BaseModel):
    name: str


async def _read(inp: ReadInput, ctx: ToolContext) -> str:
    return f"{inp.name}: {BIG}"


def reader() -> Agent:
    model = ScriptedModel(
        [
            reply("Reading a.", call("read", name="a")),
            reply("Reading b.", call("read", name="b")),
            reply(ANSWER),
        ],
        chunk_size=64,
    )
    read = define_tool("read", description="Read a file.", input_model=ReadInput, execute=_read)
    return Agent("reader", model, instructions="Read the files.", tools=[read])


async def _one_turn(store: DynamoStore) -> str:
    async with Runtime([reader()], store=store, settings=SETTINGS, concurrency=1) as rt:
        session = rt.session("files")
        sub = await session.submit("Read a and b.")
        done = await session.wait(sub.id, timeout=60)
        return done.result or ""


def fxd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FXD_"))}
    env.update(aws_environment(cwd))
    return subprocess.run(
        [sys.executable, "-m", "fxdurable", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_turn_runs_on_dynamodb_and_the_cli_checks_and_traces_it(
    serial_moto_server: str, tmp_path: Path
) -> None:
    moto_server = serial_moto_server  # a turn and its heartbeat write at once
    url = dynamo_url(moto_server, offload_threshold=64 * 1024)
    store = DynamoStore(url, session=aws_session())
    try:
        assert asyncio.run(_one_turn(store)) == ANSWER
        tasks = store.read(lambda v: list(v.session_tool_tasks("files")))
        assert [(t.tool, t.status, t.result) for t in tasks] == [
            ("read", "completed", f"a: {BIG}"),
            ("read", "completed", f"b: {BIG}"),
        ]
        assert violations(store) == []
    finally:
        store.close()
    bucket = parse_url(url).bucket
    s3 = aws_session().client("s3", endpoint_url=moto_server)
    assert len(s3.list_objects_v2(Bucket=bucket).get("Contents", [])) >= 2  # the two results

    check = fxd("check", "--store", url, "--at-rest", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok: 1 sessions, 1 submissions, 2 tool tasks"), check.stdout

    trace = fxd("trace", "files", "--store", url, cwd=tmp_path)
    assert trace.returncode == 0, trace.stderr
    lines = trace.stdout.splitlines()
    assert lines[0].startswith("session files  agent=reader status=idle lease=free"), lines[0]
    assert sum("tool read" in line and "completed" in line for line in lines) == 2, trace.stdout

    missing = fxd("trace", "nobody", "--store", url, cwd=tmp_path)
    assert missing.returncode == 2 and "files" in missing.stderr, missing.stderr
