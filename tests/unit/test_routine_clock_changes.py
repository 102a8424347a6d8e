"""Clock changes: every calendar day fires once, and the gap/fold rule of docs/routines.md.

The rule: a wall time the clocks skip runs shifted forward by the gap's length (02:30 in a
02:00→03:00 gap at 03:30); a wall time the clocks repeat runs once, at its first occurrence,
unless the hour field is a wildcard (then it follows real time). APScheduler's own CronTrigger
loses the day after a spring-forward for times before 01:00 (upstream #606, #529).
"""

from __future__ import annotations

import io
import pickle
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest

from atlas.routines.cli import print_next
from atlas.routines.schedule import next_fire_times, parse_schedule, pin

# (zone, schedule, the day of the change, its fire time on that day): spring-forward and
# fall-back, both hemispheres, a 30-minute change, and changes at midnight.
CHANGES = [
    # spring forward
    ("Europe/Warsaw", "0 0 * * *", "2017-03-26", "2017-03-26T00:00:00+01:00"),
    ("Europe/Warsaw", "30 2 * * *", "2017-03-26", "2017-03-26T03:30:00+02:00"),
    ("Europe/Paris", "0 0 * * *", "2026-03-29", "2026-03-29T00:00:00+01:00"),
    ("Europe/Paris", "30 0 * * *", "2026-03-29", "2026-03-29T00:30:00+01:00"),
    ("Europe/Paris", "30 2 * * *", "2026-03-29", "2026-03-29T03:30:00+02:00"),
    ("Europe/Paris", "every day at 0:30", "2026-03-29", "2026-03-29T00:30:00+01:00"),
    ("America/New_York", "0 0 * * *", "2026-03-08", "2026-03-08T00:00:00-05:00"),
    ("America/New_York", "0 1 * * *", "2026-03-08", "2026-03-08T01:00:00-05:00"),
    ("America/New_York", "30 2 * * *", "2026-03-08", "2026-03-08T03:30:00-04:00"),
    ("Asia/Hebron", "0 0 * * *", "2022-03-27", "2022-03-27T01:00:00+03:00"),  # 00:00 skipped
    ("Asia/Hebron", "30 0 * * *", "2022-03-27", "2022-03-27T01:30:00+03:00"),
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-04", "2026-10-04T02:45:00+11:00"),  # 30 min
    ("Australia/Lord_Howe", "0 0 * * *", "2026-10-04", "2026-10-04T00:00:00+10:30"),
    ("America/Santiago", "0 0 * * *", "2026-09-06", "2026-09-06T01:00:00-03:00"),  # south
    ("America/Santiago", "30 0 * * *", "2026-09-06", "2026-09-06T01:30:00-03:00"),
    ("Australia/Sydney", "30 2 * * *", "2026-10-04", "2026-10-04T03:30:00+11:00"),
    # fall back: the repeated time runs once, the first time
    ("America/New_York", "0 0 * * *", "2026-11-01", "2026-11-01T00:00:00-04:00"),
    ("America/New_York", "0 1 * * *", "2026-11-01", "2026-11-01T01:00:00-04:00"),
    ("America/New_York", "30 1 * * *", "2026-11-01", "2026-11-01T01:30:00-04:00"),
    ("Europe/Paris", "30 2 * * *", "2026-10-25", "2026-10-25T02:30:00+02:00"),
    ("Asia/Hebron", "0 0 * * *", "2020-10-24", "2020-10-24T00:00:00+03:00"),  # 00:00 twice
    ("Asia/Hebron", "30 0 * * *", "2020-10-24", "2020-10-24T00:30:00+03:00"),
    ("Australia/Lord_Howe", "45 1 * * *", "2026-04-05", "2026-04-05T01:45:00+11:00"),
    ("America/Santiago", "30 23 * * *", "2026-04-04", "2026-04-04T23:30:00-03:00"),
    ("Australia/Sydney", "30 2 * * *", "2026-04-05", "2026-04-05T02:30:00+11:00"),
]


def daily_fires(schedule: str, tz: tzinfo, first: date, days: int) -> list[datetime]:
    """The fire times of a daily schedule from `first` 00:00 (exclusive of the day before)."""
    start = datetime.combine(first - timedelta(days=1), time(23, 59), tzinfo=tz)
    times = next_fire_times(schedule, tz, start, days)
    assert len(times) == days
    return times


def documented(day: date, at: time, tz: tzinfo) -> datetime:
    """The rule of docs/routines.md, worked out separately from the trigger's own code."""
    wall = datetime.combine(day, at)
    first, second = wall.replace(tzinfo=tz, fold=0), wall.replace(tzinfo=tz, fold=1)
    jump = second.utcoffset() - first.utcoffset()  # type: ignore[operator]
    if jump > timedelta(0):  # the clocks skip this wall time: shift by the gap's length
        return (wall + jump).replace(tzinfo=tz)
    return min(first, second, key=lambda moment: moment.astimezone(UTC))  # the first occurrence


@pytest.mark.parametrize(("zone_name", "schedule", "day", "expected"), CHANGES)
def test_every_calendar_day_fires_once_across_a_clock_change(
    zone_name: str, schedule: str, day: str, expected: str
) -> None:
    tz = ZoneInfo(zone_name)
    change = date.fromisoformat(day)
    times = daily_fires(schedule, tz, change - timedelta(days=3), 7)
    local_days = [t.astimezone(tz).date() for t in times]
    assert local_days == [change + timedelta(days=n) for n in range(-3, 4)], times
    on_the_day = times[3]
    assert on_the_day.isoformat() == expected
    assert on_the_day.astimezone(UTC) == documented(change, _at(schedule), tz).astimezone(UTC)
    for moment, local_day in zip(times, local_days, strict=True):
        assert moment.astimezone(UTC) == documented(local_day, _at(schedule), tz).astimezone(UTC)


def _at(schedule: str) -> time:
    if schedule.startswith("every day at "):
        hour, minute = schedule.removeprefix("every day at ").split(":")
        return time(int(hour), int(minute))
    minute, hour = schedule.split()[:2]
    return time(int(hour), int(minute))


def _changes_in(tz: tzinfo, year: int) -> list[date]:
    """The local days on which `tz` changes its offset in `year`, found by stepping in hours."""
    days = []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    while moment.year == year:
        later = moment + timedelta(hours=1)
        if moment.astimezone(tz).utcoffset() != later.astimezone(tz).utcoffset():
            days.append(later.astimezone(tz).date())
        moment = later
    return days


SWEEP_ZONES = [
    "Europe/Warsaw",
    "America/New_York",
    "Asia/Hebron",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",  # changes at midnight
    "Pacific/Chatham",  # +12:45/+13:45
]


@pytest.mark.parametrize("zone_name", SWEEP_ZONES)
@pytest.mark.parametrize("at", [time(0, 0), time(0, 30), time(1, 0), time(2, 30), time(23, 30)])
def test_every_change_of_the_year_keeps_one_run_a_day_by_the_rule(zone_name: str, at: time) -> None:
    tz = ZoneInfo(zone_name)
    year = 2022 if zone_name == "Asia/Hebron" else 2026  # Hebron changed at midnight in 2022
    changes = _changes_in(tz, year)
    assert len(changes) == 2, changes  # the zone still has DST in the tzdata used
    for change in changes:
        first = change - timedelta(days=2)
        times = daily_fires(f"{at.minute} {at.hour} * * *", tz, first, 5)
        expected = [documented(first + timedelta(days=n), at, tz) for n in range(5)]
        assert [t.astimezone(UTC) for t in times] == [t.astimezone(UTC) for t in expected]


def test_weekly_runs_the_monday_after_a_spring_forward() -> None:
    paris = ZoneInfo("Europe/Paris")
    start = datetime(2026, 3, 27, 12, 0, tzinfo=paris)
    for schedule in ("30 0 * * 1", "every monday at 0:30"):
        assert [t.isoformat() for t in next_fire_times(schedule, paris, start, 2)] == [
            "2026-03-30T00:30:00+02:00",
            "2026-04-06T00:30:00+02:00",
        ]
    sunday = next_fire_times("every sunday at 2:30", paris, start, 2)
    assert [t.isoformat() for t in sunday] == [
        "2026-03-29T03:30:00+02:00",  # in the gap: shifted by its length
        "2026-04-05T02:30:00+02:00",
    ]


def real_gaps(times: list[datetime]) -> set[timedelta]:
    utc = [t.astimezone(UTC) for t in times]
    return {later - earlier for earlier, later in zip(utc, utc[1:], strict=False)}


@pytest.mark.parametrize(
    ("zone_name", "start"),
    [
        ("America/New_York", "2026-03-07T22:30"),  # spring forward
        ("America/New_York", "2026-10-31T22:30"),  # fall back: 01:00 twice, real time
        ("Asia/Hebron", "2022-03-26T22:30"),  # 00:00 does not exist
        ("Asia/Hebron", "2020-10-23T22:30"),  # 00:00 twice
        ("Europe/Paris", "2026-03-28T22:30"),
    ],
)
def test_hourly_runs_every_real_hour_across_the_change(zone_name: str, start: str) -> None:
    tz = ZoneInfo(zone_name)
    times = next_fire_times("0 * * * *", tz, datetime.fromisoformat(start).replace(tzinfo=tz), 8)
    assert real_gaps(times) == {timedelta(hours=1)}, times
    assert times[0].astimezone(tz).strftime("%H:%M") == "23:00"


def test_fixed_hours_run_once_in_the_repeated_hour() -> None:
    new_york = ZoneInfo("America/New_York")
    start = datetime(2026, 10, 31, 23, 0, tzinfo=new_york)
    times = next_fire_times("0,30 0-2 * * *", new_york, start, 6)
    assert [t.isoformat() for t in times] == [
        "2026-11-01T00:00:00-04:00",
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T02:30:00-05:00",
    ]


@pytest.mark.parametrize(
    ("schedule", "start", "expected"),
    [
        ("59/15 * * * *", "2026-03-26T12:00", ["12:59", "13:59", "14:59"]),
        ("* 23/6 * * *", "2026-03-26T22:58", ["23:00", "23:01", "23:02"]),
        ("5-10/30 * * * *", "2026-03-26T12:00", ["12:05", "13:05", "14:05"]),
        ("0 12 20/15 * *", "2026-03-01T00:00", ["20 12:00", "20 12:00", "20 12:00"]),
    ],
)
def test_a_step_past_the_end_of_its_range_is_one_value_as_in_cron(
    schedule: str, start: str, expected: list[str]
) -> None:
    times = next_fire_times(schedule, "UTC", datetime.fromisoformat(start), 3)
    shape = "%d %H:%M" if " " in expected[0] else "%H:%M"
    assert [t.strftime(shape) for t in times] == expected
    if schedule.startswith("* 23"):  # every minute of hour 23, then the next day's
        day = next_fire_times(schedule, "UTC", datetime.fromisoformat(start), 61)
        assert [t.hour for t in day[:60]] == [23] * 60
        assert day[60] - day[59] == timedelta(hours=23, minutes=1)


def test_elapsed_times_count_real_minutes_in_the_repeated_hour() -> None:
    # 01:50 EDT on the night New York goes back: 30 minutes later is 01:20 EST, not 02:20.
    new_york = ZoneInfo("America/New_York")
    now = datetime(2026, 11, 1, 1, 50, tzinfo=new_york)
    assert pin("in 30m", new_york, now) == "2026-11-01T01:20:00-05:00"
    every = parse_schedule("every 30m", new_york, now=now, anchor=now)
    assert next_fire_times(every, new_york, now, 1)[0].isoformat() == "2026-11-01T01:20:00-05:00"
    # Counting from the second 01:10 (EST) gives the fires after it, not after the first 01:10.
    second = datetime(2026, 11, 1, 1, 10, tzinfo=new_york, fold=1)
    assert [t.isoformat() for t in next_fire_times("*/20 * * * *", new_york, second, 2)] == [
        "2026-11-01T01:20:00-05:00",
        "2026-11-01T01:40:00-05:00",
    ]


def test_the_trigger_keeps_apschedulers_contract_and_pickles() -> None:
    warsaw = ZoneInfo("Europe/Warsaw")
    trigger = parse_schedule("0 0 * * *", warsaw).trigger
    previous = datetime(2017, 3, 26, 0, 0, tzinfo=warsaw)
    much_later = datetime(2017, 4, 2, 12, 0, tzinfo=warsaw)
    # After a missed stretch the next slot is the one after the last run: APScheduler then
    # drops or coalesces the late ones by the misfire grace.
    assert trigger.get_next_fire_time(previous, much_later) == datetime(2017, 3, 27, tzinfo=warsaw)
    assert trigger.get_next_fire_time(None, much_later) == datetime(2017, 4, 3, tzinfo=warsaw)
    copy = pickle.loads(pickle.dumps(trigger))
    assert copy.get_next_fire_time(previous, previous) == datetime(2017, 3, 27, tzinfo=warsaw)


def test_routines_next_prints_the_day_after_the_change(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    code = print_next("0 0 * * *", "Europe/Warsaw", "2017-03-25T12:00", 3, False, tmp_path, out)
    assert code == 0
    assert out.getvalue().splitlines() == [
        "2017-03-26T00:00:00+01:00",
        "2017-03-27T00:00:00+02:00",
        "2017-03-28T00:00:00+02:00",
    ]
