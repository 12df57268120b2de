"""Scheduled prompts: a prompt submitted to a session at a time (``at``) or on a 5-field cron
expression (``every``), each fire a submission whose request id is derived from the schedule
and the fire time, so a retried fire (a scheduler restarted, two schedulers of one schedule)
is one submission.

The cron parser is ours and small on purpose (croniter is unmaintained): minute, hour, day of
month, month, day of week (0-7, 0 and 7 Sunday), each ``*``, ``n``, ``a-b``, a step ``*/n``,
``a-b/n`` or ``a/n``, and comma lists; the macros ``@hourly``, ``@daily``, ``@weekly``,
``@monthly``, ``@yearly``. No names (``MON``, ``JAN``). Times are UTC. As in Vixie cron, when
both the day of month and the day of week are restricted, a day matching either fires.

A schedule runs where its scheduler runs (``runtime.schedule(...)`` in an embedded runtime, or
``fxdurable schedule``): the definition is not stored. On start, the latest fire due within
``catch_up_s`` is fired (a no-op if it was already submitted), so a scheduler that died in a
fire and came back finishes it once.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fxdurable.core.clock import Clock
from fxdurable.errors import ConfigurationError

__all__ = ["Cron", "Schedule", "Scheduled", "fire_request_id", "run_schedule"]

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
}
# (name, lowest, highest) of each field, in order.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 7))
_HORIZON_DAYS = 366 * 8  # a leap day on a given weekday recurs within 28 years; 8 is plenty


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                start, end = low, high
            elif "-" in base:
                a, b = base.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = int(base)
                end = high if step_text else start
        except ValueError:
            raise ConfigurationError(f"cron {name} field {text!r}: not a number") from None
        if step < 1 or not low <= start <= end <= high:
            raise ConfigurationError(f"cron {name} field {text!r}: outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed 5-field cron expression (UTC): :meth:`parse`, then :meth:`next_after`."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 Sunday .. 6 Saturday
    any_day: bool  # the day-of-month field is ``*``
    any_weekday: bool  # the day-of-week field is ``*``

    @classmethod
    def parse(cls, expression: str) -> Cron:
        text = _MACROS.get(expression.strip(), expression)
        parts = text.split()
        if len(parts) != 5:
            raise ConfigurationError(
                f"cron {expression!r}: five fields (minute hour day month weekday), "
                f"not {len(parts)}"
            )
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])  # 7 is Sunday too
        return cls(
            expression, sets[0], sets[1], sets[2], sets[3], weekdays,
            any_day=parts[2].startswith("*"), any_weekday=parts[4].startswith("*"),
        )  # fmt: skip

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, t: float) -> float:
        """The first fire time strictly after ``t`` (epoch seconds), on a whole minute."""
        start = datetime.fromtimestamp(t, tz=UTC)
        day = start.replace(hour=0, minute=0, second=0, microsecond=0)
        hours, minutes = sorted(self.hours), sorted(self.minutes)
        for _ in range(_HORIZON_DAYS):
            if self._day_matches(day):
                for hour in hours:
                    for minute in minutes:
                        fire = day.replace(hour=hour, minute=minute)
                        if fire > start:
                            return calendar.timegm(fire.utctimetuple())
            day += timedelta(days=1)
        raise ConfigurationError(f"cron {self.expression!r} never fires")


@dataclass(frozen=True, slots=True)
class Schedule:
    """What to submit where, and when: once ``at`` (epoch seconds) or on ``every`` (cron)."""

    session_id: str
    prompt: str
    at: float | None = None
    every: Cron | None = None

    def __post_init__(self) -> None:
        if (self.at is None) == (self.every is None):
            raise ConfigurationError("a schedule fires at= a time or every= a cron, not both")

    @property
    def id(self) -> str:
        """The same for the same schedule in any process: its fires' request ids rest on it."""
        when = f"at={self.at!r}" if self.every is None else f"every={self.every.expression}"
        key = "\0".join((self.session_id, self.prompt, when))
        return "sch-" + hashlib.sha256(key.encode()).hexdigest()[:16]

    def next_fire(self, after: float) -> float | None:
        """The first fire strictly after ``after``; None once a one-off has fired."""
        if self.every is not None:
            return self.every.next_after(after)
        assert self.at is not None
        return self.at if self.at > after else None


def fire_request_id(schedule_id: str, fire_at: float) -> str:
    """The request id of the fire of ``schedule_id`` at ``fire_at``: a retry is one submission."""
    return f"{schedule_id}@{int(fire_at)}"


Submit = Callable[[str, str, str], Awaitable[object]]  # (session, prompt, request_id)


async def run_schedule(
    schedule: Schedule,
    submit: Submit,
    *,
    clock: Clock,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    catch_up_s: float = 300.0,
    until: float | None = None,
    fired: list[float] | None = None,
) -> list[float]:
    """Fire ``schedule`` until cancelled (or past ``until``): sleep to each fire time by the
    injected clock, then submit with the fire's request id. Returns the fire times (appended
    to ``fired`` as they happen, when given)."""
    fired = [] if fired is None else fired
    now = clock.now()
    # The latest fire due within the catch-up window (one, not every missed one), submitted
    # already or not; else the next one.
    last = schedule.next_fire(now - catch_up_s)
    while last is not None and last <= now and (later := schedule.next_fire(last)) is not None:
        if later > now:
            break
        last = later
    while last is not None and (until is None or last <= until):
        while (left := last - clock.now()) > 0:
            await sleep(left)
        await submit(schedule.session_id, schedule.prompt, fire_request_id(schedule.id, last))
        fired.append(last)
        last = schedule.next_fire(last)
    return fired


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A schedule running in a runtime (``runtime.schedule``): its fires so far, and its task
    (cancelled with the runtime, or by :meth:`cancel`)."""

    schedule: Schedule
    fired: list[float]
    task: asyncio.Task[None]

    async def done(self) -> list[float]:
        """Wait until a one-off (``at=``) schedule has fired; the fire times."""
        await asyncio.shield(self.task)
        return list(self.fired)

    def cancel(self) -> None:
        self.task.cancel()
