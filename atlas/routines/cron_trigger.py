"""Cron fields read on the local wall clock, then placed on the time line with zoneinfo.

APScheduler 3.11's CronTrigger walks aware datetimes in the user's zone, and near a DST change it
loses days: a daily 00:00 after a spring-forward jumps to the day after next (upstream #606,
#529), and a day whose 00:00 does not exist is skipped. `WallClockTrigger` keeps APScheduler (its
CronTrigger still parses and matches the fields) but matches them in UTC, which has no DST, as
naive wall times. Each wall time is then mapped to an instant by the rule in docs/routines.md:

- a wall time the clocks skip (spring-forward gap) runs shifted forward by the gap's length
  (02:30 in a 02:00→03:00 gap runs at 03:30; 00:00 in a 00:00→01:00 gap at 01:00);
- a wall time the clocks repeat (fall-back) runs once, at its first occurrence, when the hour is
  fixed; with a wildcard hour (`*/30 * * * *`) it runs at both, as real time passes.

Two wall times landing on the same instant make one run. So every calendar day has its run.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger

_CRON_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # cron numbering: 0 = Sunday
_FIELD_RANGES = {"minute": (0, 59), "hour": (0, 23), "day": (1, 31), "month": (1, 12)}
# Offsets are sampled this far either side of the start to bound the wall times worth matching:
# no zone changes its offset twice within a day.
_OFFSET_SAMPLES = tuple(timedelta(hours=6 * k) for k in range(-4, 5))
_TICK = timedelta(microseconds=1)
_MAX_WALL_STEPS = 100_000  # a bound against a bug looping forever, not a limit anyone meets


def wall_cron(**fields: str | int) -> CronTrigger:
    """A CronTrigger that matches fields on a naive wall clock (UTC stands in for it)."""
    return CronTrigger(**fields, timezone=UTC)  # type: ignore[arg-type]


class WallClockTrigger(BaseTrigger):
    """The union of cron field sets, matched on the wall clock in `timezone`, each instant once.

    `fixed_hours` is False for a wildcard hour field: such a schedule follows real time, so the
    repeated hour at fall-back runs again. Pickles (its parts do) and keeps APScheduler's
    contract: the next fire time after `previous_fire_time` even when `now` is later, so
    misfire grace and coalescing work as with CronTrigger.
    """

    def __init__(self, triggers: list[CronTrigger], tz: tzinfo, *, fixed_hours: bool) -> None:
        self.triggers = triggers
        self.timezone = tz
        self.fixed_hours = fixed_hours

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        # As CronTrigger: the fire after the last one even when `now` is later (APScheduler
        # then applies the misfire grace and coalescing), else the first at or after `now`.
        if previous_fire_time is not None:
            start = previous_fire_time.astimezone(UTC) + _TICK
        else:
            start = now.astimezone(UTC)
        found = [self._next_of(matcher, start) for matcher in self.triggers]
        instants = [moment for moment in found if moment is not None]
        return min(instants).astimezone(self.timezone) if instants else None

    def _next_of(self, matcher: CronTrigger, start: datetime) -> datetime | None:
        """The earliest instant at or after `start` (UTC) of one field set's wall times.

        Wall times map to instants almost in order; only a time inside a gap, moved forward,
        can land after a later wall time. So scan from the earliest wall time that could reach
        `start` until no later one can beat the best found.
        """
        lowest = min(_offset(self.timezone, start + shift) for shift in _OFFSET_SAMPLES)
        wall = _naive(start) + lowest - _TICK
        best: datetime | None = None
        for _ in range(_MAX_WALL_STEPS):
            following = matcher.get_next_fire_time(None, _aware(wall) + _TICK)
            if following is None:
                return best
            wall = _naive(following)
            earliest, candidates = _instants(wall, self.timezone, fixed_hours=self.fixed_hours)
            if best is not None and earliest >= best:
                return best  # this and every later wall time is at or after the best
            for moment in candidates:
                if moment >= start and (best is None or moment < best):
                    best = moment
        return best

    def __str__(self) -> str:
        return " | ".join(str(t) for t in self.triggers)

    def __repr__(self) -> str:
        return f"<WallClockTrigger ({self}) timezone={self.timezone!s}>"


def _instants(wall: datetime, tz: tzinfo, *, fixed_hours: bool) -> tuple[datetime, list[datetime]]:
    """A lower bound on the instants of `wall` and of later wall times, and the instants (UTC)
    `wall` fires at under the gap/fold rule."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    before, after = _offset_of(first), _offset_of(second)
    lower_bound = _aware(wall - max(before, after))
    if before == after:  # an ordinary wall time
        return lower_bound, [lower_bound]
    if before < after:
        # In a gap: zoneinfo gives fold=0 the offset from before the change, which reads the
        # wall time as that many minutes past the gap's start: shifted by the gap's length.
        return lower_bound, [_aware(wall - before)]
    # Repeated: the first occurrence (the earlier offset), and the second when hours are free.
    repeats = (
        [_aware(wall - before)] if fixed_hours else [_aware(wall - before), _aware(wall - after)]
    )
    return lower_bound, repeats


def _offset(tz: tzinfo, moment: datetime) -> timedelta:
    return _offset_of(moment.astimezone(tz))


def _offset_of(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    assert offset is not None  # `moment` carries a real zone
    return offset


def _naive(moment: datetime) -> datetime:
    """A UTC-labelled datetime as a naive one (a wall time, or an instant's UTC reading)."""
    return moment.astimezone(UTC).replace(tzinfo=None)


def _aware(naive: datetime) -> datetime:
    """A naive datetime labelled UTC: how wall times reach the matchers and instants leave."""
    return naive.replace(tzinfo=UTC)


def cron_steps(field: str, name: str) -> str:
    """Cron's reading of steps that reach past the field's end: `59/15` (minutes) is 59 alone,
    `23/6` (hours) is 23 alone, `*/90` is the field's first value; APScheduler refuses them."""
    low, high = _FIELD_RANGES[name]
    parts = []
    for part in field.split(","):
        m = re.fullmatch(r"(?P<body>\*|(?P<first>\d+)(?:-(?P<last>\d+))?)/(?P<step>\d+)", part)
        if m and int(m["step"]) > 0:
            first = low if m["body"] == "*" else int(m["first"])
            last = high if m["last"] is None else int(m["last"])
            if first + int(m["step"]) > last:  # one value in range: the start
                part = str(first)
        parts.append(part)
    return ",".join(parts)


def cron_weekdays(field: str) -> str:
    """Cron's weekday field (0 or 7 = Sunday) in names: APScheduler 3 counts 0 as Monday."""
    if field in ("*", "?"):
        return "*"
    chosen: set[int] = set()
    for part in field.split(","):
        body, slash, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() else 0
        if slash and step < 1:
            raise ValueError(f"bad step in weekday {part!r}")
        low, dash, high = body.partition("-")
        first = 0 if body == "*" else _cron_day_number(low)
        last = _cron_day_number(high) if dash else (6 if body == "*" or slash else first)
        if dash and last == 0:
            last = 7  # `5-0`: Friday to Sunday
        if last < first:
            raise ValueError(f"weekday range {part!r} runs backwards")
        chosen.update(n % 7 for n in range(first, last + 1, step or 1))
    return ",".join(_CRON_DAY_NAMES[n] for n in sorted(chosen))


def _cron_day_number(token: str) -> int:
    """0-7 (7 is Sunday again) or a name; names give 0-6."""
    if token.isdigit() and 0 <= int(token) <= 7:
        return int(token)
    if token[:3] in _CRON_DAY_NAMES:
        return _CRON_DAY_NAMES.index(token[:3])
    raise ValueError(f"{token!r} is not a weekday (0-7 or sun-sat)")
