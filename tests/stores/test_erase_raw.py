"""The decisive erasure test on the networked stores: a session erased, then every raw key
and value of Redis, every DynamoDB item (moto server), every S3 object and every live row of
every table in the PostgreSQL store's schema (and its bucket's objects) searched for its
prompt's text, a tool result's text and a file's text: nothing. (SQLite's raw file:
tests/runtime/test_erase.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_support import schema_raw

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.core.store import Store
from tests.runtime.fxrt_support import run
from tests.stores.conftest import FACTORIES, MARKS
from tests.tools.test_stored_workspace import scripted

# A heartbeat of 0.5 s, not the usual 0.05: on DynamoDB each beat is a request to the serial
# moto server (one request at a time), and twenty a second queued the turn's own requests
# behind them until a renewal timed out on a loaded machine and the run was stopped.
BEATS = fx.WorkerSettings(heartbeat_s=0.5, lease_ttl_s=10, scan_interval_s=0.2)
PROMPT = "PROMPT-raw-erase-c0ffee"
FILE_TEXT = "FILE-raw-erase-" + "x" * 200  # past the offload threshold: an S3 object too
RESULT = "RESULT-raw-erase-beef"
KEPT = "KEPT-raw-other-0451"
NETWORKED = ["redis", "dynamodb", "dynamodb-s3", "postgres", "postgres-s3"]


@pytest.fixture(params=[pytest.param(n, marks=MARKS.get(n, ())) for n in NETWORKED])
def raw_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store = FACTORIES[request.param](request, tmp_path)
    yield store
    store.close()


def _redis_raw(store: Any) -> bytes:
    import redis

    client = redis.Redis.from_url(store.url.split("?")[0])
    out: list[bytes] = []
    try:
        for key in client.scan_iter(count=1000):
            out.append(key)
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"hash":
                out += [b for kv in client.hgetall(key).items() for b in kv]
            elif kind == b"zset":
                out += client.zrange(key, 0, -1)
            elif kind == b"list":
                out += client.lrange(key, 0, -1)
            else:
                out.append(client.dump(key) or b"")
    finally:
        client.close()
    return b"\n".join(out)


def _dynamo_raw(store: Any) -> bytes:
    api = store._api
    out: list[str] = []
    pages = api.dynamodb.get_paginator("scan").paginate(TableName=api.settings.table)
    for page in pages:
        out += [repr(item) for item in page["Items"]]
    if api.s3 is not None:
        listing = api.s3.get_paginator("list_objects_v2").paginate(Bucket=api.settings.bucket)
        for page in listing:
            for obj in page.get("Contents", []):
                out.append(obj["Key"])
                body = api.s3.get_object(Bucket=api.settings.bucket, Key=obj["Key"])["Body"]
                out.append(body.read().decode("utf-8", "replace"))
    return "\n".join(out).encode()


def _bucket_raw(endpoint_url: str | None, bucket: str | None) -> bytes:
    """Every object's key and bytes in a PostgreSQL store's bucket (its large blobs)."""
    from pg_s3_support import s3_client

    out: list[bytes] = []
    with s3_client(endpoint_url) as s3:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                out += [obj["Key"].encode(), body.replace(b"\n", b" ")]
    return b"\n".join(out)


def raw(store: Store) -> bytes:
    if store.url.startswith("redis"):
        return _redis_raw(store)
    if store.url.startswith("postgres"):
        s3 = store._settings.s3  # type: ignore[attr-defined]
        objects = _bucket_raw(s3.endpoint_url, s3.bucket) if s3 is not None else b""
        return schema_raw(store.url) + b"\n" + objects
    return _dynamo_raw(store)


def test_nothing_of_an_erased_session_is_left_in_the_raw_store(
    raw_store: Store, tmp_path: Path
) -> None:
    template = tmp_path / "template"
    template.mkdir()
    (template / "README.md").write_text("shared\n")
    ws = fxt.stored(template)
    turns = {
        PROMPT: [
            fx.reply("", fx.call("write_file", path="notes.txt", content=FILE_TEXT)),
            fx.reply("", fx.call("shell", command=f"echo {RESULT}")),
            fx.reply("done"),
        ],
        KEPT: [fx.reply("", fx.call("write_file", path="kept.txt", content=KEPT)), fx.reply("ok")],
    }
    agent = fx.Agent("coder", scripted(turns), tools=fxt.workspace_tools(ws))

    async def main() -> None:
        async with fx.Runtime([agent], store=raw_store, settings=BEATS) as rt:
            assert await rt.session("s1").run(PROMPT, timeout=60) == "done"
            assert await rt.session("s2").run(KEPT, timeout=60) == "ok"
            before = raw(raw_store)
            for text in (PROMPT, FILE_TEXT, RESULT, KEPT):
                assert text.encode() in before, text  # the search finds what is there
            report = await rt.session("s1").erase()
            assert len(report.blobs_deleted) == 1  # notes.txt; the template is s2's too
            after = raw(raw_store)
            for text in (PROMPT, FILE_TEXT, RESULT):
                found = [line for line in after.split(b"\n") if text.encode() in line]
                assert not found, (text, found[:3])
            assert KEPT.encode() in after
            assert ws.files_of(raw_store, "s2")["README.md"] == b"shared\n"
            assert [s.id for s in await rt_sessions(rt)] == ["s2"]

    run(main(), timeout=120)


async def rt_sessions(rt: fx.Runtime) -> list[Any]:
    return list(rt.journal.read(lambda v: v.list_sessions()))
