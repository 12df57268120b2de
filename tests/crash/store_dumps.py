"""Portable dumps of a Redis or DynamoDB store: what ``make_previous_release_store.py`` writes
of the store the previous release left, and what ``test_previous_release_store.py`` loads
into a fresh prefix or table. JSON, sorted, one value per line, so a fixture is reviewable
and loads into any server version.

Redis (``dump_redis``): every key under the store's prefix, named without it, with its type
and value: a string; a hash as ``{field: value}``; a zset as ``[[member, score], ...]`` in
score order; a list in order; a set sorted. Values are UTF-8 text, or ``{"base64": ...}``
when they are not. A key with a time to live (a commit's token) keeps what was left of it
(``pttl_ms``). Not ``DUMP``/``RESTORE``: their payloads are in one server version's RDB
encoding, which an older server refuses.

DynamoDB (``dump_dynamodb``): the table's key schema, every item as DynamoDB's wire JSON
(``{"pk": {"S": ...}, ...}``, binary values base64, as on the wire), sorted by key, and
every object of the bucket (the records offloaded to S3), base64, by key.
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["dump_dynamodb", "dump_redis", "load_dynamodb", "load_redis"]

Json = dict[str, Any]


def _text(raw: bytes) -> str | Json:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def _raw(value: str | Json) -> bytes:
    return base64.b64decode(value["base64"]) if isinstance(value, dict) else value.encode()


# -- Redis ---------------------------------------------------------------------------------


def _redis(url: str) -> tuple[Any, str]:
    """A client of the URL's server and database, and the store's key prefix."""
    import redis

    parts = urlsplit(url)
    prefix = parse_qs(parts.query).get("prefix", ["fxd"])[-1]
    return redis.Redis.from_url(parts._replace(query="").geturl()), prefix


def dump_redis(url: str) -> Json:
    client, prefix = _redis(url)
    keys: Json = {}
    try:
        version = str(client.info("server")["redis_version"])
        for key in sorted(client.scan_iter(match=f"{prefix}:*", count=1000)):
            kind = client.type(key).decode()
            value: Any
            if kind == "string":
                value = _text(client.get(key))
            elif kind == "hash":
                value = {k.decode(): _text(v) for k, v in sorted(client.hgetall(key).items())}
            elif kind == "zset":
                value = [[_text(m), s] for m, s in client.zrange(key, 0, -1, withscores=True)]
            elif kind == "list":
                value = [_text(v) for v in client.lrange(key, 0, -1)]
            elif kind == "set":
                value = [_text(v) for v in sorted(client.smembers(key))]
            else:
                raise ValueError(f"{key!r}: a {kind}, which the dump does not know")
            entry: Json = {"type": kind, "value": value}
            pttl = client.pttl(key)
            if pttl >= 0:
                entry["pttl_ms"] = pttl
            keys[key.decode()[len(prefix) + 1 :]] = entry
    finally:
        client.close()
    return {"redis_version": version, "keys": keys}


def load_redis(dump: Json, url: str) -> None:
    """Write every key of ``dump`` under the prefix of ``url``, which must hold none yet."""
    client, prefix = _redis(url)
    try:
        assert not list(client.scan_iter(match=f"{prefix}:*")), f"{url} is not empty"
        pipe = client.pipeline(transaction=True)
        for name, entry in dump["keys"].items():
            key, kind, value = f"{prefix}:{name}", entry["type"], entry["value"]
            if kind == "string":
                pipe.set(key, _raw(value))
            elif kind == "hash":
                pipe.hset(key, mapping={k: _raw(v) for k, v in value.items()})
            elif kind == "zset":
                pipe.zadd(key, {_raw(m): s for m, s in value})
            elif kind == "list":
                pipe.rpush(key, *(_raw(v) for v in value))
            elif kind == "set":
                pipe.sadd(key, *(_raw(v) for v in value))
            else:
                raise ValueError(f"{name!r}: a {kind}, which the dump does not know")
            if "pttl_ms" in entry:
                pipe.pexpire(key, max(1, int(entry["pttl_ms"])))
        pipe.execute()
    finally:
        client.close()


# -- DynamoDB and S3 -----------------------------------------------------------------------


def _wire(value: Any) -> Any:
    """An attribute value as boto3's client gives it (binary as bytes) -> as on the wire."""
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(inner).decode()}
    if kind == "BS":
        return {"BS": sorted(base64.b64encode(b).decode() for b in inner)}
    if kind == "M":
        return {"M": {k: _wire(v) for k, v in sorted(inner.items())}}
    if kind == "L":
        return {"L": [_wire(v) for v in inner]}
    return {kind: sorted(inner) if kind in ("SS", "NS") else inner}


def _client_value(value: Any) -> Any:
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64decode(inner)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b) for b in inner]}
    if kind == "M":
        return {"M": {k: _client_value(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_client_value(v) for v in inner]}
    return value


def _aws(url: str) -> tuple[Any, Any, Any]:
    """The URL's settings and DynamoDB and S3 clients (moto's dummy credentials)."""
    from aws_support import aws_session

    from fxdurable.stores._ddb_settings import parse_url

    settings = parse_url(url)
    session = aws_session()
    return (
        settings,
        session.client("dynamodb", endpoint_url=settings.endpoint_url),
        session.client("s3", endpoint_url=settings.endpoint_url),
    )


def _sort_key(item: Json) -> tuple[str, str]:
    return (str(item["pk"]["S"]), str(item["sk"]["S"]))


def dump_dynamodb(url: str) -> Json:
    settings, ddb, s3 = _aws(url)
    try:
        table = ddb.describe_table(TableName=settings.table)["Table"]
        items: list[Json] = []
        for page in ddb.get_paginator("scan").paginate(
            TableName=settings.table, ConsistentRead=True
        ):
            items += [{k: _wire(v) for k, v in sorted(i.items())} for i in page["Items"]]
        objects: Json = {}
        if settings.bucket is not None:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket):
                for obj in page.get("Contents", []):
                    body = s3.get_object(Bucket=settings.bucket, Key=obj["Key"])["Body"].read()
                    objects[obj["Key"]] = base64.b64encode(body).decode()
    finally:
        ddb.close()
        s3.close()
    return {
        "table": {
            "AttributeDefinitions": table["AttributeDefinitions"],
            "KeySchema": table["KeySchema"],
        },
        "items": sorted(items, key=_sort_key),
        "s3_objects": dict(sorted(objects.items())),
    }


def load_dynamodb(dump: Json, url: str) -> None:
    """Make the table ``url`` names with the dump's key schema (on-demand), put every item,
    and every S3 object in the URL's bucket (which must exist)."""
    settings, ddb, s3 = _aws(url)
    try:
        ddb.create_table(TableName=settings.table, BillingMode="PAY_PER_REQUEST", **dump["table"])
        deadline = time.monotonic() + 60
        while ddb.describe_table(TableName=settings.table)["Table"]["TableStatus"] != "ACTIVE":
            assert time.monotonic() < deadline, f"{settings.table} never became ACTIVE"
            time.sleep(0.2)
        for item in dump["items"]:
            ddb.put_item(
                TableName=settings.table, Item={k: _client_value(v) for k, v in item.items()}
            )
        if dump["s3_objects"]:
            assert settings.bucket is not None, f"the dump has S3 objects, {url} no bucket"
            for key, body in dump["s3_objects"].items():
                s3.put_object(Bucket=settings.bucket, Key=key, Body=base64.b64decode(body))
    finally:
        ddb.close()
        s3.close()
