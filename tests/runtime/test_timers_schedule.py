"""Scheduled prompts (runtime/schedule.py): the 5-field cron parser against known dates and a
brute-force reference, the fire loop on an injected clock and sleep, and ``runtime.schedule``
end to end on SQLite, where a fire retried by a restarted scheduler is one submission."""

from __future__ import annotations

import calendar
import functools
import random
from datetime import UTC, datetime, timedelta

import pytest
from fxrt_support import db_url, owned_store, read, run

import fxdurable as fx
from fxdurable.runtime.schedule import Cron, Schedule, fire_request_id, run_schedule
from fxdurable.testing import FakeClock


def ts(text: str) -> float:
    return calendar.timegm(datetime.fromisoformat(text).utctimetuple())


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", "2026-01-01 00:07", "2026-01-01 00:15"),
        ("*/15 * * * *", "2026-01-01 00:15", "2026-01-01 00:30"),  # strictly after
        ("0 9 * * 1-5", "2026-01-02 10:00", "2026-01-05 09:00"),  # Friday -> Monday
        ("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00"),  # the next leap day
        ("0 12 13 * 5", "2026-02-01 00:00", "2026-02-06 12:00"),  # day OR weekday
        ("0 0 * * 7", "2026-01-01 00:00", "2026-01-04 00:00"),  # 7 is Sunday
        ("30 2 1 */3 *", "2026-01-05 00:00", "2026-04-01 02:30"),
        ("5/20 * * * *", "2026-01-01 00:26", "2026-01-01 00:45"),
        ("@daily", "2026-01-01 00:00", "2026-01-02 00:00"),
        ("0 0 31 4 *", "2026-01-01 00:00", None),  # never: April has 30 days
    ],
)
def test_cron_next_fire_on_known_dates(expression: str, after: str, expected: str | None) -> None:
    cron = Cron.parse(expression)
    if expected is None:
        with pytest.raises(fx.ConfigurationError, match="never fires"):
            cron.next_after(ts(after))
        return
    assert iso(cron.next_after(ts(after))) == expected


@pytest.mark.parametrize(
    "expression",
    ["61 * * * *", "* * *", "a * * * *", "*/0 * * * *", "* 5-2 * * *", "* * 0 * *", "* * * * 8"],
)
def test_cron_refuses_what_it_cannot_read(expression: str) -> None:
    with pytest.raises(fx.ConfigurationError, match="cron"):
        Cron.parse(expression)


def _brute_force(expression: str, after: datetime, limit_days: int = 20) -> datetime | None:
    """The reference: walk minute by minute with cron's rules written out plainly."""
    fields = expression.split()

    @functools.cache
    def match(value: int, field: str, low: int, high: int) -> bool:
        for part in field.split(","):
            base, _, step = part.partition("/")
            if base == "*":
                a, b = low, high
            elif "-" in base:
                a, b = map(int, base.split("-"))
            else:
                a = int(base)
                b = high if step else a
            if a <= value <= b and (value - a) % int(step or 1) == 0:
                return True
        return False

    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(limit_days * 24 * 60):
        weekday = (t.weekday() + 1) % 7
        dom = match(t.day, fields[2], 1, 31)
        dow = match(weekday, fields[4], 0, 7) or (weekday == 0 and match(7, fields[4], 0, 7))
        restricted = not fields[2].startswith("*") and not fields[4].startswith("*")
        day_ok = (dom or dow) if restricted else (dom and dow)
        if (
            match(t.minute, fields[0], 0, 59)
            and match(t.hour, fields[1], 0, 23)
            and match(t.month, fields[3], 1, 12)
            and day_ok
        ):
            return t
        t += timedelta(minutes=1)
    return None


def test_cron_agrees_with_a_brute_force_reference_on_random_expressions() -> None:
    rng = random.Random(28)
    choices = {
        0: ["*", "*/7", "0", "15,45", "10-20/5", "59"],
        1: ["*", "*/6", "0", "9-17", "23"],
        2: ["*", "1", "15", "1-7", "*/10"],
        3: ["*", "*/2", "2", "6-8"],
        4: ["*", "0", "1-5", "6,7", "3"],
    }
    checked = 0
    for _ in range(60):
        expression = " ".join(rng.choice(choices[i]) for i in range(5))
        after = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(60 * 24 * 90))
        expected = _brute_force(expression, after)
        if expected is None:
            continue  # rarer than 20 days: beyond the reference's reach
        got = Cron.parse(expression).next_after(after.timestamp())
        assert iso(got) == expected.strftime("%Y-%m-%d %H:%M"), (expression, after)
        checked += 1
    assert checked >= 25  # the reference reached many of them (29 with this seed)


def test_the_fire_loop_submits_each_fire_once_with_its_own_request_id() -> None:
    clock = FakeClock(start=ts("2026-01-01 00:02"))
    submitted: list[tuple[str, str, str]] = []

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    async def submit(session: str, prompt: str, request_id: str) -> None:
        submitted.append((session, prompt, request_id))

    plan = Schedule("s1", "report", every=Cron.parse("*/5 * * * *"))
    fired = run(run_schedule(plan, submit, clock=clock, sleep=sleep, until=ts("2026-01-01 00:15")))
    # The catch-up fires the latest due slot (00:00, within 300 s), then each slot to 00:15.
    assert [iso(t) for t in fired] == [
        "2026-01-01 00:00",
        "2026-01-01 00:05",
        "2026-01-01 00:10",
        "2026-01-01 00:15",
    ]
    assert [r for _, _, r in submitted] == [fire_request_id(plan.id, t) for t in fired]
    assert len(set(submitted)) == 4
    with pytest.raises(fx.ConfigurationError, match="not both"):
        Schedule("s1", "x", at=1.0, every=Cron.parse("@hourly"))


def test_runtime_schedule_fires_at_its_time_and_a_restarted_scheduler_adds_nothing(tmp_path):
    url = db_url(tmp_path)
    clock = FakeClock()
    at = clock.now() + 3600

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    agent = fx.Agent("eng", fx.ScriptedModel(lambda request: fx.reply("reported")))

    async def once() -> list[str]:
        async with fx.Runtime([agent], store=owned_store(url), clock=clock, sleep=sleep) as rt:
            scheduled = rt.schedule("s1", "report", at=at)
            assert await scheduled.done() == [at]  # fired (or, the second time, retried)
            (sub,) = read(rt, lambda v: v.submissions("s1"))
            assert sub.request_id == fire_request_id(scheduled.schedule.id, at)
            assert (await rt.session("s1").wait(sub.id, timeout=10)).result == "reported"
            return [sub.id]

    first = run(once())
    clock.advance(60)  # restarted a minute later: the fire is within the catch-up window
    assert run(once()) == first  # the retried fire found its submission: still one


def test_fxdurable_schedule_prints_fires_and_a_rerun_fire_is_one_submission(tmp_path, capsys):
    import time

    from fxdurable.cli.main import main
    from fxdurable.stores.sqlite import SqliteStore

    args = ["schedule", "s1", "hi", "--every", "0 9 * * 1-5", "--next", "2"]
    assert main([*args, "--after", "2026-01-02T10:00:00Z"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("2026-01-05T09:00:00Z sch-") and lines[2].startswith("2026-01-06")

    url = f"sqlite:///{tmp_path}/cli.db"
    at = datetime.fromtimestamp(int(time.time()) - 10, tz=UTC).isoformat()
    once = ["schedule", "s1", "hi", "--at", at, "--store", url, "--queue", "local"]
    assert main(once) == 0
    assert " submitted" in capsys.readouterr().out
    assert main(once) == 0  # a restarted scheduler: the fire is within its catch-up window
    assert "already submitted" in capsys.readouterr().out
    store = SqliteStore(url)
    (sub,) = store.read(lambda v: v.submissions("s1"))
    assert sub.request_id is not None and sub.request_id.startswith("sch-")
    store.close()
