"""Store backends, chosen by URL."""

from __future__ import annotations

from fxdurable.core.store import Store
from fxdurable.errors import ConfigurationError

__all__ = ["open_store"]


def open_store(url: str, *, create: bool = True) -> Store:
    """Open the store a URL names: ``sqlite:///path.db`` (the embedded default) or
    ``redis://host:port/db`` (``rediss://`` for TLS; needs ``pip install 'fxdurable[redis]'``).

    ``create=False`` is for read-only tools: a missing or foreign store is an error, and
    nothing (not even the schema) is written.
    """
    scheme = url.split(":", 1)[0]
    if scheme == "sqlite":
        from fxdurable.stores.sqlite import SqliteStore

        return SqliteStore(url, create=create)
    if scheme in ("redis", "rediss"):
        try:
            from fxdurable.stores.redis import RedisStore
        except ImportError as exc:  # the module itself maps a missing redis package
            raise ConfigurationError(
                f"the Redis store cannot be loaded ({exc}): pip install 'fxdurable[redis]'"
            ) from exc

        return RedisStore(url, create=create)
    if scheme == "dynamodb":
        raise ConfigurationError(
            "the dynamodb store is not available in this version of fxdurable; "
            "use sqlite:///path.db or redis://host:port/db"
        )
    raise ConfigurationError(
        f"unknown store URL {url!r}: expected sqlite:///path.db or redis://host:port/db "
        "(dynamodb:// comes later)"
    )
