"""The schedule grammar: every form, DST changes, month ends, refusals, `atlas routines next`."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from atlas.routines.cli import print_next
from atlas.routines.schedule import (
    ACCEPTED_FORMS,
    ScheduleError,
    default_grace,
    last_fire_between,
    next_fire_times,
    parse_duration,
    parse_schedule,
    pin,
)

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
# A Friday at noon, two days before Paris springs forward (2025-03-30, 02:00 → 03:00).
FRIDAY_NOON = datetime(2025, 3, 28, 12, 0, tzinfo=PARIS)


def fires(schedule: str, start: datetime = FRIDAY_NOON, count: int = 4, tz=PARIS) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.isoformat() for t in next_fire_times(schedule, tz, start, count)]


def real_gaps(times: list[datetime]) -> set[timedelta]:
    """Elapsed time between fire times (subtracting in one zone would give wall-clock gaps)."""
    utc = [t.astimezone(ZoneInfo("UTC")) for t in times]
    return {b - a for a, b in zip(utc, utc[1:], strict=False)}


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("every 30m", ["2025-03-28T12:30:00+01:00", "2025-03-28T13:00:00+01:00"]),
        ("every 2h", ["2025-03-28T14:00:00+01:00", "2025-03-28T16:00:00+01:00"]),
        ("every 90 minutes", ["2025-03-28T13:30:00+01:00", "2025-03-28T15:00:00+01:00"]),
        ("every 1d", ["2025-03-29T12:00:00+01:00", "2025-03-30T12:00:00+02:00"]),
        ("in 30m", ["2025-03-28T12:30:00+01:00"]),
        ("in 2h", ["2025-03-28T14:00:00+01:00"]),
        ("every day at 18:30", ["2025-03-28T18:30:00+01:00", "2025-03-29T18:30:00+01:00"]),
        ("daily at noon", ["2025-03-29T12:00:00+01:00", "2025-03-30T12:00:00+02:00"]),
        ("weekdays at 9am", ["2025-03-31T09:00:00+02:00", "2025-04-01T09:00:00+02:00"]),
        ("weekends at 10am", ["2025-03-29T10:00:00+01:00", "2025-03-30T10:00:00+02:00"]),
        ("every monday at 9am", ["2025-03-31T09:00:00+02:00", "2025-04-07T09:00:00+02:00"]),
        (
            "every mon,wed,fri at 7:15pm",
            ["2025-03-28T19:15:00+01:00", "2025-03-31T19:15:00+02:00"],
        ),
        (
            "every tuesday and thursday at 12am",
            ["2025-04-01T00:00:00+02:00", "2025-04-03T00:00:00+02:00"],
        ),
        (
            "every month on the 1st at 8:00",
            ["2025-04-01T08:00:00+02:00", "2025-05-01T08:00:00+02:00"],
        ),
        ("30 9 * * 1-5", ["2025-03-31T09:30:00+02:00", "2025-04-01T09:30:00+02:00"]),
        ("2025-07-01T09:00", ["2025-07-01T09:00:00+02:00"]),
        ("2025-07-01 09:00+00:00", ["2025-07-01T11:00:00+02:00"]),
        ("2025-07-01T07:00Z", ["2025-07-01T09:00:00+02:00"]),
    ],
)
def test_every_form_fires_when_expected(schedule: str, expected: list[str]) -> None:
    assert fires(schedule, count=len(expected) + 1)[: len(expected)] == expected
    if "in " in schedule or schedule.startswith("2025"):
        assert len(fires(schedule)) == 1  # once


def test_forms_become_the_matching_apscheduler_triggers() -> None:
    assert isinstance(parse_schedule("every 2h", PARIS).trigger, IntervalTrigger)
    assert isinstance(parse_schedule("in 5m", PARIS).trigger, DateTrigger)
    assert isinstance(parse_schedule("2025-07-01T09:00", PARIS).trigger, DateTrigger)
    daily = parse_schedule("every day at 9am", PARIS).trigger
    assert all(isinstance(t, CronTrigger) for t in daily.triggers)  # type: ignore[attr-defined]
    assert parse_schedule("in 5m", PARIS).once
    assert not parse_schedule("every 5m", PARIS).once


def test_a_daily_time_in_the_spring_gap_runs_once_an_hour_later() -> None:
    # 02:30 does not exist in Paris on 2025-03-30: that day it runs at 03:30, once.
    assert fires("every day at 2:30") == [
        "2025-03-29T02:30:00+01:00",
        "2025-03-30T03:30:00+02:00",
        "2025-03-31T02:30:00+02:00",
        "2025-04-01T02:30:00+02:00",
    ]


@pytest.mark.parametrize("schedule", ["every day at 2:30", "30 2 * * *", "every 1d"])
def test_a_repeated_hour_in_autumn_runs_once(schedule: str) -> None:
    # Paris goes back from 03:00 to 02:00 on 2025-10-26: 02:30 happens twice, the run once.
    start = datetime(2025, 10, 25, 2, 0, tzinfo=PARIS) if schedule == "every 1d" else None
    start = start or datetime(2025, 10, 24, 12, 0, tzinfo=PARIS)
    times = next_fire_times(schedule, PARIS, start, 4)
    days = [t.date() for t in times]
    assert len(days) == len(set(days)), times
    assert all(t.strftime("%H:%M") in ("02:00", "02:30") for t in times)


def test_wildcard_hours_follow_real_time_across_the_autumn_change() -> None:
    # "every 30 minutes" means every 30 real minutes: the repeated hour runs twice.
    start = datetime(2025, 10, 26, 1, 50, tzinfo=PARIS)
    times = next_fire_times("*/30 * * * *", PARIS, start, 6)
    assert real_gaps(times) == {timedelta(minutes=30)}


def test_new_york_daily_keeps_its_wall_clock_and_intervals_keep_elapsed_time() -> None:
    # New York springs forward on 2025-03-09.
    start = datetime(2025, 3, 8, 7, 0, tzinfo=NEW_YORK)
    daily = next_fire_times("every day at 8am", NEW_YORK, start, 3)
    assert [t.strftime("%H:%M%z") for t in daily] == ["08:00-0500", "08:00-0400", "08:00-0400"]
    hourly = next_fire_times("every 12h", NEW_YORK, start, 3)
    assert real_gaps(hourly) == {timedelta(hours=12)}
    assert hourly[1].strftime("%H:%M") == "08:00"  # 12 real hours across the change


def test_month_ends_fall_back_to_the_last_day() -> None:
    start = datetime(2027, 12, 31, 12, 0, tzinfo=PARIS)
    assert [t[:10] for t in fires("every month on the 31st at 8:00", start, 6)] == [
        "2028-01-31",
        "2028-02-29",  # a leap year
        "2028-03-31",
        "2028-04-30",
        "2028-05-31",
        "2028-06-30",
    ]
    assert [t[:10] for t in fires("every month on the 30th at 8:00", start, 3)] == [
        "2028-01-30",
        "2028-02-29",
        "2028-03-30",
    ]
    assert [t[:10] for t in fires("every month on the 29th at 8:00", start, 3)] == [
        "2028-01-29",
        "2028-02-29",  # the 29th and the last day at once: one run
        "2028-03-29",
    ]
    early = datetime(2026, 1, 31, 12, 0, tzinfo=PARIS)
    assert [t[:10] for t in fires("every month on the last day at 23:00", early, 2)] == [
        "2026-01-31",
        "2026-02-28",
    ]


def test_cron_counts_sunday_as_zero_and_seven() -> None:
    sunday = datetime(2025, 3, 30, tzinfo=PARIS).date()
    for expression in ("0 9 * * 0", "0 9 * * 7", "0 9 * * sun"):
        assert next_fire_times(expression, PARIS, FRIDAY_NOON, 1)[0].date() == sunday
    weekend = {t.strftime("%a") for t in next_fire_times("0 9 * * 5-0", PARIS, FRIDAY_NOON, 6)}
    assert weekend == {"Fri", "Sat", "Sun"}


def test_cron_day_and_weekday_both_given_means_either() -> None:
    # Standard cron: the 1st of the month OR a Monday.
    times = next_fire_times("0 9 1 * 1", PARIS, FRIDAY_NOON, 3)
    assert [t.date().isoformat() for t in times] == ["2025-03-31", "2025-04-01", "2025-04-07"]


@pytest.mark.parametrize(
    "schedule",
    [
        "",
        "every fortnight",
        "tomorrow at 9",
        "every 0m",
        "every day at 25:00",
        "every day at 9",
        "every funday at 9am",
        "every month on the 32nd at 8:00",
        "61 * * * *",
        "2025-13-01T09:00",
    ],
)
def test_anything_else_is_refused_with_the_accepted_forms(schedule: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule, PARIS)
    message = str(caught.value)
    assert repr(schedule) in message
    assert all(form in message for form in ACCEPTED_FORMS)


def test_unknown_zone_is_refused() -> None:
    with pytest.raises(ScheduleError, match="Mars/Olympus"):
        next_fire_times("every 1h", "Mars/Olympus")


def test_in_is_pinned_to_a_date_so_a_restart_does_not_move_it() -> None:
    assert pin("in 30m", PARIS, FRIDAY_NOON) == "2025-03-28T12:30:00+01:00"
    assert pin("every  day at 9am", PARIS, FRIDAY_NOON) == "every day at 9am"


def test_intervals_are_anchored_so_a_restart_keeps_their_rhythm() -> None:
    anchor = datetime(2025, 3, 28, 10, 7, tzinfo=PARIS)
    schedule = parse_schedule("every 2h", PARIS, anchor=anchor)
    assert next_fire_times(schedule, PARIS, FRIDAY_NOON, 1)[0].strftime("%H:%M") == "12:07"


def test_last_fire_between_finds_only_the_latest_missed_slot() -> None:
    anchor = datetime(2025, 3, 20, 9, 0, tzinfo=PARIS)
    schedule = parse_schedule("every 1h", PARIS, anchor=anchor)
    now = datetime(2025, 3, 28, 12, 20, tzinfo=PARIS)
    assert last_fire_between(schedule, anchor, now) == datetime(2025, 3, 28, 12, 0, tzinfo=PARIS)
    monthly = parse_schedule("every month on the 1st at 8:00", PARIS)
    since = datetime(2024, 1, 15, tzinfo=PARIS)
    assert last_fire_between(monthly, since, now) == datetime(2025, 3, 1, 8, 0, tzinfo=PARIS)
    assert last_fire_between(monthly, datetime(2025, 3, 2, tzinfo=PARIS), now) is None


def test_default_grace_is_one_period_at_most_the_cap() -> None:
    cap = timedelta(hours=24)
    assert default_grace(parse_schedule("every 30m", PARIS), cap) == timedelta(minutes=30)
    assert default_grace(parse_schedule("every monday at 9am", PARIS), cap) == cap
    assert default_grace(parse_schedule("*/10 * * * *", PARIS), cap) == timedelta(minutes=10)
    assert default_grace(parse_schedule("in 5m", PARIS), cap) == cap
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("90") == timedelta(seconds=90)
    with pytest.raises(ScheduleError):
        parse_duration("soon")


def test_next_command_works_without_a_home(tmp_path: Path) -> None:
    out = io.StringIO()
    code = print_next(
        "every day at 9am", "Europe/Paris", "2025-03-28T12:00", 3, False, tmp_path, out
    )
    assert code == 0
    assert out.getvalue().splitlines() == [
        "2025-03-29T09:00:00+01:00",
        "2025-03-30T09:00:00+02:00",
        "2025-03-31T09:00:00+02:00",
    ]
    out = io.StringIO()
    assert print_next("every 1h", None, "2025-01-01T00:00", 2, True, tmp_path, out) == 0
    assert json.loads(out.getvalue()) == ["2025-01-01T01:00:00+00:00", "2025-01-01T02:00:00+00:00"]
    assert print_next("whenever", "UTC", None, 2, False, tmp_path, io.StringIO()) == 2
