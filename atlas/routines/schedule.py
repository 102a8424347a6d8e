"""The schedule grammar: a few plain-English forms, cron and ISO dates → APScheduler triggers.

Every form is read in the user's time zone, and wall-clock forms stay on the wall clock across
DST changes (cron_trigger.py): a daily 02:30 runs once on the night the clocks go back, and at
03:30 on the night they skip 02:30. Day 29-31 of a month falls back to the month's last day in
shorter months.

    schedule = parse_schedule("weekdays at 9am", "Europe/Paris")
    next_fire_times("every month on the 31st at 8:00", "UTC", count=3)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from atlas.errors import AtlasError
from atlas.routines.cron_trigger import WallClockTrigger, cron_steps, cron_weekdays, wall_cron

ACCEPTED_FORMS = (
    "every 30m | every 2h | every 1d   (repeats from when the routine is set up)",
    "in 30m | in 2h | in 1d            (once)",
    "every day at 18:30",
    "weekdays at 9am                   (also: weekends at 10am)",
    "every monday at 9am | every mon,wed,fri at 7:15pm",
    "every month on the 1st at 8:00    (the 29th-31st mean the last day in shorter months;"
    " also: on the last day)",
    "a 5-field cron expression         (minute hour day month weekday, e.g. 30 9 * * 1-5;"
    " 0 and 7 are Sunday)",
    "an ISO date-time, once            (2025-07-01T09:00, or with an offset: 2025-07-01T09:00+02:00)",
)

MIN_INTERVAL = timedelta(minutes=1)
_TICK = timedelta(microseconds=1)
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
_UNIT = r"(?P<n>\d+)\s*(?P<unit>m|mins?|minutes?|h|hrs?|hours?|d|days?)"
_DAY_WORD = r"(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)[a-z]*"
_SHORT_MONTHS = {
    29: "2",
    30: "2",
    31: "2,4,6,9,11",
}  # months that lack this day (Feb: in most years)


class ScheduleError(AtlasError):
    """A schedule that is not one of the accepted forms."""


def refusal(text: str, why: str = "") -> ScheduleError:
    forms = "\n".join(f"  {form}" for form in ACCEPTED_FORMS)
    because = f": {why}" if why else ""
    return ScheduleError(f"cannot read the schedule {text!r}{because}. Accepted forms:\n{forms}")


@dataclass(frozen=True)
class Schedule:
    text: str
    trigger: BaseTrigger
    once: bool  # runs a single time (`in 30m`, an ISO date-time)
    period: timedelta | None  # the usual gap between runs; None when it runs once


def zone(tz: str | tzinfo) -> tzinfo:
    if not isinstance(tz, str):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {tz!r} (use an IANA name like 'Europe/Paris')"
        ) from None


def normalise(moment: datetime, tz: tzinfo) -> datetime:
    """The same instant shown in the zone: a wall time the clocks skipped becomes the real one."""
    return moment.astimezone(UTC).astimezone(tz)


def later(moment: datetime, elapsed: timedelta, tz: tzinfo) -> datetime:
    """`elapsed` real time after `moment`, in the zone. Adding to an aware datetime moves its
    wall clock instead: 01:50 + 30m would be 02:20, 90 minutes on the night the clocks go back."""
    return normalise(moment.astimezone(UTC) + elapsed, tz)


class DayIntervalTrigger(BaseTrigger):
    """Every N days at the anchor's wall-clock time (a day is a calendar day, 23-25 hours)."""

    def __init__(self, days: int, anchor: datetime, tz: tzinfo) -> None:
        self.days = days
        self.timezone = tz
        local = anchor.astimezone(tz)
        self.first = local.date() + timedelta(days=days)
        self.at = local.time().replace(tzinfo=None)

    def _on(self, day: date) -> datetime:
        return normalise(datetime.combine(day, self.at, tzinfo=self.timezone), self.timezone)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        after = previous_fire_time.astimezone(UTC) + _TICK if previous_fire_time else now
        today = after.astimezone(self.timezone).date()
        steps = max(0, -(-(today - self.first).days // self.days))  # ceiling division
        day = self.first + timedelta(days=steps * self.days)
        if self._on(day) < after:
            day += timedelta(days=self.days)
        return self._on(day)

    def __str__(self) -> str:
        return f"every {self.days} day(s) at {self.at.isoformat(timespec='minutes')}"


def parse_schedule(
    text: str,
    tz: str | tzinfo,
    *,
    now: datetime | None = None,
    anchor: datetime | None = None,
) -> Schedule:
    """Read a schedule. `now` places `in 30m`; `anchor` (default: now) starts `every N` forms."""
    tz = zone(tz)
    now = now or datetime.now(tz)
    anchor = anchor or now
    spoken = " ".join(text.strip().lower().split())
    if not spoken:
        raise refusal(text, "it is empty")
    if m := re.fullmatch(rf"every {_UNIT}", spoken):
        return _interval(text, _amount(m, text), anchor, tz)
    if m := re.fullmatch(rf"in {_UNIT}", spoken):
        when = later(now, _amount(m, text), tz)
        return Schedule(text, DateTrigger(when, timezone=tz), once=True, period=None)
    if m := re.fullmatch(r"(?:every day|daily) at (?P<at>.+)", spoken):
        at = parse_time_of_day(m["at"], text)
        return _cron(text, tz, [_daily(at)], timedelta(days=1))
    if m := re.fullmatch(r"(?:every )?(?P<kind>weekday|weekend)s? at (?P<at>.+)", spoken):
        at = parse_time_of_day(m["at"], text)
        days = "mon-fri" if m["kind"] == "weekday" else "sat,sun"
        return _cron(text, tz, [_daily(at, day_of_week=days)], timedelta(days=1))
    if m := re.fullmatch(
        rf"every (?P<days>{_DAY_WORD}(?:\s*(?:,|and)\s*{_DAY_WORD})*) at (?P<at>.+)", spoken
    ):
        days = _weekdays(m["days"], text)
        at = parse_time_of_day(m["at"], text)
        return _cron(text, tz, [_daily(at, day_of_week=",".join(days))], timedelta(days=7))
    if m := re.fullmatch(
        r"every month on the (?P<day>last day|\d{1,2}(?:st|nd|rd|th)?) at (?P<at>.+)", spoken
    ):
        at = parse_time_of_day(m["at"], text)
        return _cron(text, tz, _monthly(m["day"], at, text), timedelta(days=28))
    if len(spoken.split()) == 5 and re.fullmatch(r"[\w*/,\- ]+", spoken):
        return _crontab(text, spoken, tz)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}[t ]\d{1,2}:\d{2}.*", spoken):
        return _moment(text, tz)
    raise refusal(text)


def _amount(m: re.Match[str], text: str) -> timedelta:
    amount = timedelta(**{_UNITS[m["unit"][0]]: int(m["n"])})
    if amount < MIN_INTERVAL:
        raise refusal(text, "the shortest interval is 1 minute")
    return amount


def _interval(text: str, every: timedelta, anchor: datetime, tz: tzinfo) -> Schedule:
    if every % timedelta(days=1) == timedelta(0):
        # Whole days follow the calendar, so a daily run keeps its hour across DST changes.
        trigger: BaseTrigger = DayIntervalTrigger(every.days, anchor, tz)
    else:
        start = later(anchor, every, tz)
        trigger = IntervalTrigger(seconds=int(every.total_seconds()), start_date=start)
        trigger.timezone = tz  # fire times shown in the user's zone
    return Schedule(text, trigger, once=False, period=every)


def parse_time_of_day(spoken: str, text: str) -> time:
    """`9am`, `7:15pm`, `18:30`, `8:00`, `noon`, `midnight`."""
    spoken = spoken.strip()
    if spoken in ("noon", "midday"):
        return time(12, 0)
    if spoken == "midnight":
        return time(0, 0)
    m = re.fullmatch(r"(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<half>am|pm|a\.m\.|p\.m\.)?", spoken)
    if not m or (m["m"] is None and m["half"] is None):
        raise refusal(text, f"{spoken!r} is not a time of day (like 9am, 7:15pm or 18:30)")
    hour, minute = int(m["h"]), int(m["m"] or 0)
    if m["half"]:
        if not 1 <= hour <= 12:
            raise refusal(text, f"{spoken!r}: with am/pm the hour is 1 to 12")
        hour = hour % 12 + (12 if m["half"].startswith("p") else 0)
    if hour > 23 or minute > 59:
        raise refusal(text, f"{spoken!r} is not a time of day")
    return time(hour, minute)


def _weekdays(spoken: str, text: str) -> list[str]:
    full = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    days: list[str] = []
    for word in re.split(r"\s*(?:,|and)\s*", spoken):
        bare = word.removesuffix("s") if len(word) > 3 else word  # "mondays"
        match = [day[:3] for day in full if len(bare) >= 3 and day.startswith(bare)]
        if not match:
            raise refusal(text, f"{word!r} is not a day of the week")
        if match[0] not in days:
            days.append(match[0])
    return days


def _daily(at: time, **fields: str) -> CronTrigger:
    return wall_cron(hour=at.hour, minute=at.minute, **fields)


def _monthly(day: str, at: time, text: str) -> list[CronTrigger]:
    if day == "last day":
        return [_daily(at, day="last")]
    number = int(re.match(r"\d+", day).group())  # type: ignore[union-attr]
    if not 1 <= number <= 31:
        raise refusal(text, f"a month has no day {number}")
    triggers = [_daily(at, day=str(number))]
    if number in _SHORT_MONTHS:
        triggers.append(_daily(at, day="last", month=_SHORT_MONTHS[number]))
    return triggers


def _cron(
    text: str, tz: tzinfo, triggers: list[CronTrigger], period: timedelta, *, fixed: bool = True
) -> Schedule:
    return Schedule(text, WallClockTrigger(triggers, tz, fixed_hours=fixed), False, period)


def _crontab(text: str, spoken: str, tz: tzinfo) -> Schedule:
    minute, hour, day, month, weekday = spoken.split()
    try:
        weekday = cron_weekdays(weekday)
        fields = {
            "minute": cron_steps(minute, "minute"),
            "hour": cron_steps(hour, "hour"),
            "month": cron_steps(month, "month"),
        }
        day = cron_steps(day, "day")
        if day != "*" and weekday != "*":
            # Cron runs when either the day of the month or the weekday matches.
            triggers = [wall_cron(day=day, **fields), wall_cron(day_of_week=weekday, **fields)]
        else:
            triggers = [wall_cron(day=day, day_of_week=weekday, **fields)]
    except ValueError as exc:
        raise refusal(text, f"not a valid cron expression ({exc})") from None
    schedule = _cron(text, tz, triggers, timedelta(days=1), fixed=not hour.startswith("*"))
    return Schedule(text, schedule.trigger, False, _shortest_gap(schedule.trigger, tz))


def _shortest_gap(trigger: BaseTrigger, tz: tzinfo) -> timedelta:
    """The smallest gap among the next few fire times: a cron expression's period."""
    times = _fire_times(trigger, datetime.now(tz), 4)
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    return min(gaps) if gaps else timedelta(days=1)


def _moment(text: str, tz: tzinfo) -> Schedule:
    raw = text.strip().replace(" ", "T", 1)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise refusal(text, f"not an ISO date-time ({exc})") from None
    moment = normalise(moment if moment.tzinfo else moment.replace(tzinfo=tz), tz)
    return Schedule(text, DateTrigger(moment, timezone=tz), once=True, period=None)


def _ts(moment: datetime) -> float:
    """An instant as a number: comparing two datetimes of one zone compares wall clocks, which
    misorders the hour repeated when the clocks go back."""
    return moment.timestamp()


def _fire_times(trigger: BaseTrigger, start: datetime, count: int) -> list[datetime]:
    times: list[datetime] = []
    previous: datetime | None = None
    now = start
    while len(times) < count:
        upcoming = trigger.get_next_fire_time(previous, now)
        if upcoming is None or (previous is not None and _ts(upcoming) <= _ts(previous)):
            break
        times.append(upcoming)
        previous = now = upcoming
    return times


def next_fire_times(
    schedule: str | Schedule,
    tz: str | tzinfo,
    start: datetime | None = None,
    count: int = 5,
) -> list[datetime]:
    """The next `count` fire times after `start` (default now), in the zone, with offsets."""
    tz = zone(tz)
    start = start or datetime.now(tz)
    if start.tzinfo is None:
        start = start.replace(tzinfo=tz)
    if isinstance(schedule, str):
        schedule = parse_schedule(schedule, tz, now=start, anchor=start)
    after = start.astimezone(UTC) + _TICK  # strictly after start: `--from 09:00` skips 09:00
    times = _fire_times(schedule.trigger, after, count)
    return [normalise(t, tz) for t in times if _ts(t) > _ts(start)]  # a past one-off: none


def pin(text: str, tz: str | tzinfo, now: datetime | None = None) -> str:
    """The schedule to keep: `in 30m` becomes its ISO date-time, so a restart does not move it."""
    tz = zone(tz)
    now = now or datetime.now(tz)
    schedule = parse_schedule(text, tz, now=now)
    if schedule.once and re.match(r"\s*in\s", text.lower()):
        fire = schedule.trigger.get_next_fire_time(None, now)
        assert fire is not None  # a DateTrigger always has its one date
        return normalise(fire, tz).isoformat(timespec="seconds")
    return " ".join(text.split())


def default_grace(schedule: Schedule, max_grace: timedelta) -> timedelta:
    """How late a missed run may still start: one period, at most `max_grace`."""
    if schedule.period is None:
        return max_grace
    return min(schedule.period, max_grace)


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d` or a number of seconds, for graces and time limits."""
    spoken = text.strip().lower()
    if spoken.isdigit():
        return timedelta(seconds=int(spoken))
    m = re.fullmatch(
        r"(\d+)\s*(s|sec|secs|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?)", spoken
    )
    if not m:
        raise ScheduleError(f"{text!r} is not a duration (like 90s, 30m, 2h, 1d)")
    unit = {"s": "seconds", **_UNITS}[m[2][0]]
    return timedelta(**{unit: int(m[1])})


def last_fire_between(schedule: Schedule, after: datetime, now: datetime) -> datetime | None:
    """The latest fire time in (after, now], or None: what a routine missed while Atlas was
    down. Searched in growing windows back from now, so a long downtime costs few steps."""
    trigger = schedule.trigger
    after, now = after.astimezone(UTC), now.astimezone(UTC)  # real time, not wall-clock sums
    for span in (timedelta(hours=1), timedelta(days=1), timedelta(days=32), timedelta(days=400)):
        start = max(after, now - span)
        latest = _last_in(trigger, start, after, now)
        if latest is not None or start == after:
            return latest
    return _last_in(trigger, after, after, now)


def _last_in(
    trigger: BaseTrigger, start: datetime, after: datetime, now: datetime
) -> datetime | None:
    latest = None
    upcoming = trigger.get_next_fire_time(None, start)
    for _ in range(100_000):  # a bound, not a limit anyone meets: windows keep this small
        if upcoming is None or _ts(upcoming) > _ts(now):
            break
        if _ts(upcoming) > _ts(after):
            latest = upcoming
        following = trigger.get_next_fire_time(upcoming, upcoming)
        if following is None or _ts(following) <= _ts(upcoming):
            break
        upcoming = following
    return latest
