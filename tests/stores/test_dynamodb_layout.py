"""The DynamoDB store's layout versions on a moto server (fxdurable/stores/_ddb_layout.py;
the mechanism: fxdurable/stores/_layout.py): the ``#SCHEMA`` marker's encoding, what an open
does with pending steps, ``migrate``, concurrent and dead migrators, failing steps, and writes
whose answer is lost. Steps are injected (``migrations=``): the store has none yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_support import aws_session, use_aws_environment
from botocore.exceptions import ReadTimeoutError
from dynamo_support import dynamo_url

from fxdurable.errors import SchemaOutdatedError, StoreError, StoreUnavailableError
from fxdurable.stores._ddb_api import Api
from fxdurable.stores._ddb_layout import DynamoLayout, DynamoMarker, DynamoStep, migrate
from fxdurable.stores._ddb_settings import parse_url
from fxdurable.stores.dynamodb import DynamoStore

pytestmark = pytest.mark.aws

KEY = {"pk": {"S": "#SCHEMA"}, "sk": {"S": "#"}}


def opened(url: str, **kw: Any) -> DynamoStore:
    return DynamoStore(url, session=aws_session(), **kw)


def client(url: str) -> Any:
    return aws_session().client("dynamodb", endpoint_url=parse_url(url).endpoint_url)


def marker(url: str) -> dict[str, str]:
    """The ``#SCHEMA`` item's attributes but its key, each as the string DynamoDB holds."""
    item = client(url).get_item(TableName=parse_url(url).table, Key=KEY, ConsistentRead=True)
    return {
        name: next(iter(value.values()))
        for name, value in item["Item"].items()
        if name not in ("pk", "sk")
    }


def set_marker(url: str, **attrs: dict[str, str]) -> None:
    client(url).put_item(TableName=parse_url(url).table, Item={**KEY, **attrs})


def table_items(url: str) -> list[dict[str, Any]]:
    items = client(url).scan(TableName=parse_url(url).table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))


def a_step(
    name: str, runs: list[str], *, compatible: bool = True, delay_s: float = 0.0
) -> DynamoStep:
    """A step that writes an item ``X#<name>`` (idempotent: a put) and notes each run."""

    def apply(store: DynamoLayout) -> None:
        runs.append(name)
        time.sleep(delay_s)
        store.api.call(
            store.api.dynamodb,
            "put_item",
            TableName=store.table,
            Item={"pk": {"S": f"X#{name}"}, "sk": {"S": "#"}},
        )

    return DynamoStep(name=name, compatible=compatible, apply=apply)


def has_item(url: str, pk: str) -> bool:
    return any(item["pk"]["S"] == pk for item in table_items(url))


@pytest.fixture
def url(moto_server: str) -> str:
    """A store at layout 1, as every release so far has left it."""
    made = dynamo_url(moto_server)
    opened(made, migrations=()).close()
    return made


def opens(url: str, **kw: Any) -> int:
    """Open and close a store; the requests the open sent."""
    store = opened(url, **kw)
    try:
        assert store.read(lambda v: v.get_session("nobody")) is None
        return store.requests - 1  # the read above
    finally:
        store.close()


# -- the marker ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compatible", "written"),
    [
        (None, {"v": "1"}),
        (True, {"v": "1", "layout": "2"}),
        (False, {"v": "2"}),
    ],
)
def test_a_new_store_is_made_at_the_code_s_layout_without_running_steps(
    moto_server: str, compatible: bool | None, written: dict[str, str]
) -> None:
    """Layout 1 code writes what every release has (``v`` = 1, no ``layout``); code with a
    step makes the store at its own layout, with ``v`` the floor, and runs nothing."""
    url = dynamo_url(moto_server)
    runs: list[str] = []
    steps = () if compatible is None else (a_step("add", runs, compatible=compatible),)
    opened(url, migrations=steps).close()
    assert marker(url) == written
    assert runs == []


def test_today_s_marker_opens_with_one_get_item_and_is_left_as_it_is(url: str) -> None:
    set_marker(url, v={"N": "1"})  # exactly what a released fxdurable writes
    for create in (True, False):
        assert opens(url, create=create, migrations=()) == 1
    assert marker(url) == {"v": "1"}


def test_a_compatible_step_is_applied_once_by_a_writer_s_open(url: str) -> None:
    runs: list[str] = []
    steps = (a_step("add", runs),)
    opens(url, migrations=steps)
    assert runs == ["add"] and has_item(url, "X#add")
    # The floor stays 1: released code, which reads only ``v``, still opens the store.
    assert marker(url) == {"v": "1", "layout": "2"}
    assert opens(url, migrations=steps) == 1  # migrated: one GetItem again
    assert runs == ["add"]
    for create in (True, False):  # code that knows no step opens it as it is
        assert opens(url, create=create, migrations=()) == 1
    assert marker(url) == {"v": "1", "layout": "2"}


def test_a_breaking_step_stops_the_open_and_migrate_applies_it(url: str) -> None:
    runs: list[str] = []
    steps = (a_step("rewrite", runs, compatible=False),)
    before = table_items(url)
    for create in (True, False):
        with pytest.raises(SchemaOutdatedError, match=r"run `fxdurable migrate dynamodb://"):
            opened(url, create=create, migrations=steps)
    assert table_items(url) == before and runs == []

    assert migrate(url, migrations=steps, session=aws_session()) == (1, 2)
    assert runs == ["rewrite"] and marker(url) == {"v": "2"}
    assert migrate(url, migrations=steps, session=aws_session()) == (2, 2)
    assert runs == ["rewrite"]
    assert opens(url, migrations=steps) == 1
    with pytest.raises(StoreError, match="layout 2 or later"):  # the floor keeps old code out
        opened(url, migrations=())


def test_a_reader_never_migrates_and_writes_nothing(url: str) -> None:
    runs: list[str] = []
    before = table_items(url)
    assert opens(url, create=False, migrations=(a_step("add", runs),)) == 1
    with pytest.raises(SchemaOutdatedError, match="fxdurable migrate"):
        opened(url, create=False, migrations=(a_step("cut", runs, compatible=False),))
    assert runs == [] and table_items(url) == before


def test_a_store_whose_floor_is_newer_than_the_code_is_refused(url: str) -> None:
    set_marker(url, v={"N": "3"}, layout={"N": "4"})
    says = r"layout version 4, which only fxdurable of layout 3 or later .* uses layout version 2"
    steps = (a_step("add", []),)
    for create in (True, False):
        with pytest.raises(StoreError, match=says):
            opened(url, create=create, migrations=steps)
    with pytest.raises(StoreError, match=says):
        migrate(url, migrations=steps, session=aws_session())
    assert marker(url) == {"v": "3", "layout": "4"}


def test_a_store_newer_by_compatible_steps_opens(url: str) -> None:
    set_marker(url, v={"N": "1"}, layout={"N": "3"})
    assert opens(url, migrations=()) == 1
    assert migrate(url, migrations=(), session=aws_session()) == (3, 3)


def test_a_marker_that_is_not_fxdurable_s_is_refused(url: str) -> None:
    set_marker(url, v={"S": "one"})
    with pytest.raises(StoreError, match="not fxdurable's"):
        opened(url, migrations=())


def test_migrate_refuses_a_missing_table_and_marks_a_bare_one(moto_server: str) -> None:
    url = dynamo_url(moto_server)
    runs: list[str] = []
    steps = (a_step("add", runs),)
    with pytest.raises(StoreError, match="no DynamoDB table"):
        migrate(url, migrations=steps, session=aws_session())
    client(url).create_table(
        TableName=parse_url(url).table,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    assert migrate(url, migrations=steps, session=aws_session()) == (0, 2)
    assert runs == [] and marker(url) == {"v": "1", "layout": "2"}


# -- migrators -------------------------------------------------------------------------------


def _together(*calls: Callable[[], object]) -> list[object]:
    """Run ``calls`` in threads started at once; their results (or what they raised)."""
    results: list[object] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.fixture
def serial_url(serial_moto_server: str) -> str:
    """A store at layout 1 on the moto server that serves one request at a time: moto's
    threaded one does not make a conditional update atomic against another."""
    made = dynamo_url(serial_moto_server)
    opened(made, migrations=()).close()
    return made


def test_two_migrators_run_a_slow_step_once(serial_url: str) -> None:
    runs: list[str] = []
    steps = (a_step("slow", runs, compatible=False, delay_s=0.5),)

    def one() -> object:
        return migrate(serial_url, migrations=steps, session=aws_session())

    results = _together(one, one)
    assert results == [(1, 2), (1, 2)]
    assert runs == ["slow"] and marker(serial_url) == {"v": "2"}


def test_a_running_step_s_claim_is_renewed_past_its_ttl(serial_url: str) -> None:
    """The step outlasts the claim's TTL twice over; its migrator's renewals keep the
    second migrator waiting rather than taking over."""
    runs: list[str] = []
    steps = (a_step("slow", runs, compatible=False, delay_s=2.0),)

    def first() -> object:
        return migrate(serial_url, migrations=steps, claim_ttl_s=1.0, session=aws_session())

    def second() -> object:
        while not runs:  # until the first holds the claim and its step has begun
            threading.Event().wait(0.01)
        return migrate(serial_url, migrations=steps, claim_ttl_s=1.0, session=aws_session())

    assert _together(first, second) == [(1, 2), (1, 2)]
    assert runs == ["slow"]


def test_a_dead_migrator_s_claim_is_taken_over_once_it_lapses(url: str) -> None:
    """A migrator killed mid-step leaves its claim and the marker at layout 1; the next one
    waits out the claim, then runs the step again from the start."""
    until = time.time() + 1.0
    set_marker(url, v={"N": "1"}, claim={"S": "dead"}, claim_until={"N": repr(until)})
    started: list[float] = []
    runs: list[str] = []
    step = a_step("add", runs, compatible=False)

    def timed(store: DynamoLayout) -> None:
        started.append(time.time())
        step.apply(store)

    steps = (DynamoStep(name="add", compatible=False, apply=timed),)
    assert migrate(url, migrations=steps, session=aws_session()) == (1, 2)
    assert runs == ["add"] and started[0] >= until  # not while the claim was live
    assert marker(url) == {"v": "2"}  # the claim is gone with the advance


def test_a_step_that_raises_leaves_the_layout_and_frees_the_step(url: str) -> None:
    def boom(store: DynamoLayout) -> None:
        raise RuntimeError("boom")

    for compatible in (True, False):
        steps = (DynamoStep(name="boom", compatible=compatible, apply=boom),)
        with pytest.raises(StoreError, match=r"step 2 \(boom\) failed.*boom.*layout version 1"):
            if compatible:
                opened(url, migrations=steps)
            else:
                migrate(url, migrations=steps, session=aws_session())
        assert marker(url) == {"v": "1"}  # no claim left to wait out
    runs: list[str] = []
    fixed = (a_step("boom", runs, compatible=False),)
    assert migrate(url, migrations=fixed, session=aws_session()) == (1, 2)
    assert runs == ["boom"]


# -- answers lost in transit -----------------------------------------------------------------


def lose_answer(session: Any, operation: str, nth: int) -> list[int]:
    """Make the ``nth`` ``operation`` of clients made from ``session`` lose its answer: it
    reached DynamoDB (and was applied), then the client raises a read timeout. Returns the
    list the hook appends ``nth`` to when it fired."""
    seen: list[int] = []
    fired: list[int] = []

    def hook(**_: Any) -> None:
        seen.append(1)
        if len(seen) == nth:
            fired.append(nth)
            raise ReadTimeoutError(endpoint_url="http://lost")

    session.events.register(f"after-call.dynamodb.{operation}", hook)
    return fired


@pytest.mark.parametrize("budget", ["&retry_budget_s=0", ""], ids=["surfaced", "resent"])
@pytest.mark.parametrize("nth", [1, 2], ids=["claim", "advance"])
def test_a_lost_answer_is_read_again_and_the_step_runs_once(
    url: str, nth: int, budget: str
) -> None:
    """The claim's or the advance's answer is lost after DynamoDB applied it. With no retry
    budget the loop gets StoreUnavailableError and reads the marker; with one, Api resends
    and the resend's condition no longer holds. Either way the next read decides."""
    session = aws_session()
    fired = lose_answer(session, "UpdateItem", nth)
    runs: list[str] = []
    steps = (a_step("add", runs, compatible=False),)
    assert migrate(url + budget, migrations=steps, session=session) == (1, 2)
    assert fired == [nth] and runs == ["add"] and marker(url) == {"v": "2"}


def test_a_marker_write_whose_answer_is_lost_raises_unavailable(url: str) -> None:
    session = aws_session()
    fired = lose_answer(session, "UpdateItem", 1)
    api = Api(parse_url(url + "&retry_budget_s=0"), session)
    try:
        with pytest.raises(StoreUnavailableError, match="outcome is unknown"):
            DynamoMarker(api).claim(1, "tok", 30.0)
        assert fired == [1]
        assert marker(url)["claim"] == "tok"  # it was applied all the same
    finally:
        api.close()


def test_a_condition_that_does_not_hold_writes_nothing_and_raises_nothing(url: str) -> None:
    api = Api(parse_url(url), aws_session())
    try:
        io = DynamoMarker(api)
        io.claim(2, "tok", 30.0)  # not at layout 2
        io.renew("tok", 30.0)  # not held
        io.advance("tok", 2, 1)
        io.release("tok")
        io.create(5, 5)  # a marker exists
        assert marker(url) == {"v": "1"}
        io.claim(1, "tok", 30.0)
        io.claim(1, "other", 30.0)  # a live claim is held
        found = io.read()
        assert found is not None and found.claim == "tok"
        io.release("other")
        io.release("tok")
        assert marker(url) == {"v": "1"}
    finally:
        api.close()


def test_the_migrate_command_reaches_a_dynamodb_store(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fxdurable.cli.main import main

    use_aws_environment(monkeypatch, tmp_path)
    opened(url).close()
    assert main(["migrate", url]) == 0  # today's code has no DynamoDB step
    assert "layout is at version 1: nothing to migrate" in capsys.readouterr().out
