"""What a Redis store URL asks for, and what the server must offer before fxdurable writes to it
(no key eviction; an append-only file, unless the URL says ``?durability=none``).

Used by :mod:`fxdurable.stores.redis`, whose docstring documents the URL options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fxdurable.errors import ConfigurationError, StoreError
from fxdurable.stores._redis_wire import text

__all__ = ["Target", "check_eviction", "check_persistence", "parse_url", "redact"]

_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    db: int
    prefix: str
    durability: str  # "aof": the server must persist every commit; "none": not checked

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.db} (prefix {self.prefix!r})"


def redact(url: str) -> str:
    """The URL without its password, for messages and ``store.url``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:  # unparseable: hide whatever precedes an "@" in the authority
        return re.sub(r"^([^:/]*://)[^/@]*@", r"\1***@", url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def parse_url(url: str) -> tuple[Target, dict[str, Any]]:
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigurationError(f"not a Redis URL: {shown!r} ({exc})") from exc
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigurationError(
            f"not a Redis URL: {shown!r} (expected redis://host:port/db or rediss://...)"
        )
    path = parts.path.strip("/")
    if not path.isdigit() and path:
        raise ConfigurationError(f"the Redis database must be a number in {shown!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    prefix = options.pop("prefix", "fxd")
    durability = options.pop("durability", "aof")
    if durability not in ("aof", "none"):
        raise ConfigurationError(
            f"durability must be aof (the default) or none in {shown!r}, not {durability!r}"
        )
    if not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"prefix {prefix!r} in {shown!r}: use 1 to 64 letters, digits, '.', '_' or '-'"
        )
    kwargs: dict[str, Any] = {
        "host": parts.hostname,
        "port": port,
        "db": int(path or 0),
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password is not None else None,
        "socket_timeout": 10.0,
        "socket_connect_timeout": 5.0,
        "protocol": 2,  # replies are parsed here as RESP2
        "retry": Retry(NoBackoff(), 0),  # never re-send a command behind a WATCH's back
        "health_check_interval": 0,
    }
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name in options:
            try:
                kwargs[name] = float(options.pop(name))
            except ValueError as exc:
                raise ConfigurationError(f"{name} must be seconds in {shown!r}") from exc
    if parts.scheme == "rediss":
        kwargs["connection_class"] = redis.SSLConnection
        if "ssl_cert_reqs" in options:
            reqs = options.pop("ssl_cert_reqs")
            if reqs not in ("none", "optional", "required"):
                raise ConfigurationError(
                    f"ssl_cert_reqs must be none, optional or required in {shown!r}"
                )
            kwargs["ssl_cert_reqs"] = reqs
        if "ssl_ca_certs" in options:
            kwargs["ssl_ca_certs"] = options.pop("ssl_ca_certs")
    if options:
        raise ConfigurationError(f"unknown Redis URL options {sorted(options)} in {shown!r}")
    target = Target(parts.hostname, port, kwargs["db"], prefix, durability)
    return target, kwargs


def check_eviction(info: object, where: str) -> None:
    if not isinstance(info, bytes):  # INFO may be refused by an ACL: then we cannot tell
        return
    policy = re.search(rb"^maxmemory_policy:(\S+)", info, re.MULTILINE)
    if policy is not None and policy.group(1).startswith(b"allkeys-"):
        raise StoreError(
            f"redis at {where} evicts keys under memory pressure "
            f"(maxmemory-policy {text(policy.group(1))}): fxdurable's records must "
            "never be evicted; use noeviction (or a volatile-* policy: only the commit "
            "tokens have a TTL, and losing one early only weakens a resend after a lost "
            "answer)"
        )


_ENABLE_AOF = (
    "enable the append-only file: appendonly yes with appendfsync everysec (or always) in "
    "redis.conf, CONFIG SET appendonly yes on a running server, or start redis-server "
    "--appendonly yes; or add ?durability=none to the store URL if losing the store on a "
    "restart is acceptable (tests, caches)"
)


def check_persistence(info: object, fsync: object, where: str) -> None:
    """Refuse a server that does not log every commit to its append-only file."""
    if not isinstance(info, bytes):
        raise ConfigurationError(
            f"cannot tell whether redis at {where} persists its data: INFO persistence was "
            f"refused ({info}); allow INFO for this user, then {_ENABLE_AOF}"
        )
    if not re.search(rb"^aof_enabled:1\b", info, re.MULTILINE):
        snapshots = "RDB snapshots alone lose every write since the last snapshot"
        raise ConfigurationError(
            f"redis at {where} runs without an append-only file (appendonly no; {snapshots}), "
            f"so a restart would lose committed steps: {_ENABLE_AOF}"
        )
    # CONFIG may be renamed away (managed services): then the AOF being on must do.
    if isinstance(fsync, list) and len(fsync) == 2 and fsync[1] == b"no":
        raise ConfigurationError(
            f"redis at {where} runs with appendfsync no, leaving the AOF's flushes to the "
            f"operating system (a power cut loses up to about 30 s of commits): {_ENABLE_AOF}"
        )
