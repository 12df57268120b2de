"""The DynamoDB store's layout marker and migrations (the mechanism: :mod:`._layout`).

**Encoding.** The marker is the ``#SCHEMA`` item (sk ``#``). Its ``v`` attribute stays what
every release has written and read: a number. It now means the *floor*, the oldest layout of
code that may open the store; the layout itself is ``layout``, written only when it differs
from the floor (absent: equal). So today's marker, ``v = 1`` and no ``layout``, is layout 1,
floor 1; and a store migrated by compatible steps keeps ``v`` at the number code of an older
layout compares its own with (released code of layout 1 refuses anything but ``1`` there),
so that code keeps running on it, as the steps promise. A migrator's claim on the next step
is ``claim`` (its token) and ``claim_until`` (epoch seconds) on the same item.

Every write is one conditional request on that item: ``UpdateItem`` for claim, renew,
advance and release (each a compare-and-set, atomic on one item), ``PutItem`` on
``attribute_not_exists(pk)`` for a new store. A condition that does not hold is no error (the
loop's next read decides); a lost answer is an unknown outcome, raised by
:class:`~fxdurable.stores._ddb_api.Api` as :class:`~fxdurable.errors.StoreUnavailableError`
once its retry budget is spent, and again the loop reads the marker (one ``GetItem``) and
goes on from what it finds.

**Clocks.** DynamoDB has no TTL that acts at once, so a claim's expiry is a number the
migrator writes (its clock plus ``claim_ttl_s``) and the next migrator compares with its own
clock. Skew between their machines shortens or extends a dead migrator's claim by the skew
(the TTL is 30 s by default, renewed every 10 s while the step runs): a clock minutes off can
let a second migrator take a live claim, so the machines that migrate must keep their clocks
in sync (NTP) as the leases already require.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fxdurable.errors import StoreError
from fxdurable.stores._ddb_api import Api, ConditionFailed
from fxdurable.stores._ddb_items import SCHEMA
from fxdurable.stores._ddb_settings import parse_url
from fxdurable.stores._layout import (
    CLAIM_TTL_S,
    LayoutStep,
    Marker,
    check_marker,
    code_layout,
    floor_of,
    migrate_layout,
)

__all__ = [
    "MIGRATIONS",
    "DynamoLayout",
    "DynamoMarker",
    "DynamoStep",
    "apply_compatible",
    "check_opened",
    "fetch_marker",
    "migrate",
    "new_marker",
    "parse_marker",
]

Raw = dict[str, Any]  # an item as DynamoDB sends it: {"v": {"N": "1"}, ...}


@dataclass(frozen=True, slots=True)
class DynamoLayout:
    """What a DynamoDB layout step works on: the store's requests (counted, retried, errors
    mapped: a step sends through ``api.call``) and its table."""

    api: Api
    table: str


DynamoStep = LayoutStep[DynamoLayout]

# The layout steps after layout 1, in order (the first makes layout 2). None yet: blob
# partitions came after layout 1 as items older code never reads, without a step.
MIGRATIONS: tuple[DynamoStep, ...] = ()

_KEY = {"pk": {"S": SCHEMA[0]}, "sk": {"S": SCHEMA[1]}}
# Every attribute by a placeholder: no name of the marker's may collide with a reserved word.
_NAMES = {"#v": "v", "#l": "layout", "#c": "claim", "#u": "claim_until"}
# The marker is at :l: its ``layout`` when it has one, else its floor ``v``.
_AT = "((attribute_exists(#l) AND #l = :l) OR (attribute_not_exists(#l) AND #v = :l))"


def _n(number: float) -> dict[str, str]:
    return {"N": repr(number)}


def _marker_item(layout: int, floor: int) -> Raw:
    item: Raw = {**_KEY, "v": _n(floor)}
    if layout != floor:
        item["layout"] = _n(layout)
    return item


def fetch_marker(api: Api) -> Raw | None:
    """The marker item as it is now, strongly consistent (None: no marker). Raises
    :class:`~fxdurable.stores._ddb_api.TableMissing` for no table."""
    reply = api.call(
        api.dynamodb, "get_item", TableName=api.settings.table, Key=_KEY, ConsistentRead=True
    )
    raw = reply.get("Item")
    return raw if raw else None


def parse_marker(raw: Raw | None, describe: str, now: float | None = None) -> Marker | None:
    """The marker in ``raw`` (None: no store); with ``now``, its claim when still live."""
    if raw is None:
        return None
    try:
        floor = int(raw["v"]["N"])
        layout = int(raw["layout"]["N"]) if "layout" in raw else floor
        claim = None
        if now is not None and "claim" in raw and float(raw["claim_until"]["N"]) >= now:
            claim = str(raw["claim"]["S"])
    except (KeyError, ValueError):
        raise StoreError(f"{describe} holds a #SCHEMA item that is not fxdurable's") from None
    return Marker(layout=layout, floor=floor, claim=claim)


def check_opened(
    raw: Raw | None, steps: Sequence[DynamoStep], *, create: bool, where: str, url: str
) -> bool:
    """Judge the marker an open read: raises for no store, a foreign or newer one and a
    pending breaking step; True when the writer must apply compatible steps first."""
    describe = f"DynamoDB {where}"
    found = parse_marker(raw, describe)
    if found is None:
        raise StoreError(
            f"no fxdurable store in DynamoDB {where}: the table has no #SCHEMA marker "
            "(open it once to write, or check the table name)"
        )
    return check_marker(found, steps, create=create, describe=describe, url=url)


def new_marker(api: Api, steps: Sequence[DynamoStep]) -> None:
    """What a writer's open of a table without a marker writes: the marker of a new store at
    ``steps``' layout, unless another process wrote one first (the open reads it next)."""
    layout = code_layout(steps)
    DynamoMarker(api).create(layout, floor_of(steps, layout))


class DynamoMarker:
    """The primitives :func:`~fxdurable.stores._layout.migrate_layout` drives, on ``api``.

    Api has mapped botocore's errors already (a lost answer: StoreUnavailableError); only a
    condition that did not hold is caught here, where it means "read again"."""

    def __init__(self, api: Api) -> None:
        self._api = api

    @property
    def describe(self) -> str:
        return f"DynamoDB {self._api.where}"

    def read(self) -> Marker | None:
        return parse_marker(fetch_marker(self._api), self.describe, now=time.time())

    def _write(self, operation: str, **params: Any) -> None:
        # A condition that did not hold wrote nothing: the loop's next read says what holds.
        with contextlib.suppress(ConditionFailed):
            self._api.call(
                self._api.dynamodb,
                operation,
                unknown_outcome=True,
                TableName=self._api.settings.table,
                **params,
            )

    def _update(self, update: str, condition: str, values: dict[str, Any]) -> None:
        names = {k: v for k, v in _NAMES.items() if k in update or k in condition}
        self._write(
            "update_item",
            Key=_KEY,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def create(self, layout: int, floor: int) -> None:
        self._write(
            "put_item",
            Item=_marker_item(layout, floor),
            ConditionExpression="attribute_not_exists(pk)",
        )

    def claim(self, layout: int, token: str, ttl_s: float) -> None:
        now = time.time()  # this migrator's clock judges the expiry (the module says why)
        self._update(
            "SET #c = :t, #u = :until",
            f"{_AT} AND (attribute_not_exists(#c) OR #u < :now)",
            {":l": _n(layout), ":t": {"S": token}, ":until": _n(now + ttl_s), ":now": _n(now)},
        )

    def renew(self, token: str, ttl_s: float) -> None:
        self._update(
            "SET #u = :until", "#c = :t", {":t": {"S": token}, ":until": _n(time.time() + ttl_s)}
        )

    def advance(self, token: str, layout: int, floor: int) -> None:
        values = {":t": {"S": token}, ":l": _n(layout - 1), ":f": _n(floor)}
        if layout == floor:  # a breaking step: the floor says the layout too
            update = "SET #v = :f REMOVE #l, #c, #u"
        else:
            update = "SET #v = :f, #l = :layout REMOVE #c, #u"
            values[":layout"] = _n(layout)
        self._update(update, f"#c = :t AND {_AT}", values)

    def release(self, token: str) -> None:
        self._update("REMOVE #c, #u", "#c = :t", {":t": {"S": token}})

    def apply(self, step: DynamoStep) -> None:
        # No mapping here: a step sends through Api, whose errors are fxdurable's already.
        step.apply(DynamoLayout(self._api, self._api.settings.table))


def apply_compatible(api: Api, steps: Sequence[DynamoStep], *, url: str) -> None:
    """A writer's open of an older store: apply its pending steps, all compatible (judged by
    :func:`check_opened`, and again by the loop, which reads the marker afresh)."""
    migrate_layout(DynamoMarker(api), steps, url=url, breaking=False)


def migrate(
    url: str,
    *,
    migrations: Sequence[DynamoStep] = MIGRATIONS,
    claim_ttl_s: float = CLAIM_TTL_S,
    session: Any = None,
) -> tuple[int, int]:
    """``fxdurable migrate dynamodb://...``: apply every layout step the store lacks, breaking
    ones included; returns (layout before, layout after), 0 before for a table that had no
    marker. A missing table is refused (production tables come from the SAM template)."""
    api = Api(parse_url(url), session)
    try:
        return migrate_layout(
            DynamoMarker(api), migrations, url=url, breaking=True, claim_ttl_s=claim_ttl_s
        )
    finally:
        api.close()
