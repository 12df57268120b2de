"""The read-cache shape the Redis and DynamoDB stores share (fxdurable/stores/_cache.py)."""

from __future__ import annotations

from fxdurable.stores._cache import VersionedCache


class Held:
    def __init__(self, version: int, carried: list[str] | None = None) -> None:
        self.version = version
        self.values: dict[str, str] = {}
        self.carried = carried if carried is not None else []


def made(version: int, previous: Held | None) -> Held:
    return Held(version, previous.carried if previous is not None else None)


def test_an_entry_is_used_at_its_version_and_replaced_by_a_newer_one_only() -> None:
    cache = VersionedCache(made, limit=4)
    first = cache.at("p", 3)
    assert first is not None and cache.at("p", 3) is first
    first.values["k"] = "v"
    first.carried.append("memo")
    assert cache.at("p", 2) is None  # an older reader's fetch is not kept
    assert cache.get("p") is first
    newer = cache.at("p", 4)
    assert newer is not None and newer is not first
    assert newer.values == {} and newer.carried == ["memo"]  # what holds at any version carries


def test_least_recently_used_partition_goes_first() -> None:
    cache = VersionedCache(made, limit=2)
    cache.at("a", 1)
    cache.at("b", 1)
    cache.get("a")  # used: "b" is now the oldest
    cache.at("c", 1)
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None


def test_drop_forgets_what_a_run_read() -> None:
    cache = VersionedCache(made, limit=4)
    cache.at("a", 1)
    cache.at("b", 1)
    cache.drop(["a", "missing"])
    assert cache.get("a") is None and cache.get("b") is not None


def test_advance_applies_a_commit_only_to_entries_it_proved_current() -> None:
    cache = VersionedCache(made, limit=8)
    for key in ("read", "stale", "jumped", "unread"):
        cache.at(key, 5)
    applied: list[str] = []

    def apply(key: str, entry: Held) -> None:
        applied.append(key)
        entry.values["w"] = "written"

    cache.advance(
        read={"read": 5, "stale": 4, "jumped": 5},
        moved={"read": 6, "stale": 5, "jumped": 7, "unread": 6, "never-held": 1},
        apply=apply,
    )
    assert applied == ["read"]
    entry = cache.get("read")
    assert entry is not None and entry.version == 6 and entry.values == {"w": "written"}
    # Read at another version, moved more than one on, or written without being read: the
    # commit does not prove what the entry holds, so it goes.
    assert cache.get("stale") is None
    assert cache.get("jumped") is None
    assert cache.get("unread") is None
