"""Routines written as files, `routines/<name>.toml` in the home, reconciled with the stored
ones by name: a new file adds a routine, an edited file updates it, a deleted file removes it.
A file that did not change since the last reload leaves its routine alone, so pausing a file
routine from the CLI holds until the file is edited."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atlas.config import NAME_PATTERN, find_line, read_toml
from atlas.errors import ConfigError
from atlas.routines.schedule import ScheduleError, parse_duration, parse_schedule
from atlas.routines.store import RoutineStore, Target
from atlas.routines.targets import resolve_channel
from atlas.store.db import iso_utc
from atlas.trust.threats import scan

if TYPE_CHECKING:
    from atlas.home import Home

log = logging.getLogger(__name__)


class _TargetFields(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channel: str = Field(min_length=1)
    chat: str = Field(min_length=1)
    thread: str = ""
    user: str = ""


class _RoutineFields(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1)
    schedule: str = Field(min_length=1)
    bot: str | None = None  # default: the main agent
    paused: bool = False
    grace: str | int | None = None  # `2h`, `30m` or seconds
    precheck: str = ""  # a command: exit 0 runs the model, 1 skips the run (precheck.py)
    target: _TargetFields | None = None


@dataclass(frozen=True)
class RoutineFile:
    path: Path
    name: str
    bot: str
    prompt: str
    schedule: str
    target: Target | None
    paused: bool
    grace_seconds: int | None
    digest: str
    written_at: str  # the file's modification time (ISO, UTC): when the user armed it
    precheck: str = ""


@dataclass
class ReconcileReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("created", self.created),
                ("updated", self.updated),
                ("removed", self.removed),
                ("unchanged", self.unchanged),
            )
            if names
        ]
        lines = ["; ".join(parts) or "no routine files"]
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


def read_routine_file(path: Path, home: Home) -> RoutineFile:
    """One file, validated (schedule, bot, prompt scanned); ConfigError naming what is wrong."""
    name = path.stem
    if not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(f"{path}: the file name is the routine's name: use a-z, 0-9, - and _")
    data, text = read_toml(path)
    try:
        fields = _RoutineFields.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from None
    bot = fields.bot or home.settings.main
    if bot not in home.bots:
        raise ConfigError(f"{path}: bot {bot!r} does not exist (bots: {', '.join(home.bots)})")
    if re.match(r"\s*in\s", fields.schedule.lower()):
        raise ConfigError(
            f"{path}: schedule: `in …` has no fixed start in a file; give a date-time"
        )
    try:
        parse_schedule(fields.schedule, home.settings.timezone)
        grace = (
            None if fields.grace is None else int(parse_duration(str(fields.grace)).total_seconds())
        )
    except ScheduleError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if threat := scan(fields.prompt):
        raise ConfigError(f"{path}: prompt refused: {threat}")
    target = None
    if fields.target:
        try:
            channel = resolve_channel(home, bot, fields.target.channel)
        except ConfigError as exc:
            line = find_line(text, ("target", "channel"))
            where = f" (line {line})" if line else ""
            raise ConfigError(f"{path}: target.channel{where}: {exc}") from None
        target = Target(**(fields.target.model_dump() | {"channel": channel}))
    return RoutineFile(
        path=path,
        name=name,
        bot=bot,
        prompt=fields.prompt.strip(),
        schedule=" ".join(fields.schedule.split()),
        target=target,
        paused=fields.paused,
        grace_seconds=grace,
        digest=hashlib.sha256(text.encode()).hexdigest()[:16],
        written_at=iso_utc(path.stat().st_mtime),
        precheck=fields.precheck.strip(),
    )


async def reconcile_files(home: Home, store: RoutineStore) -> ReconcileReport:
    """Bring the stored file routines in line with `routines/*.toml`."""
    report = ReconcileReport()
    declared: set[tuple[str, str]] = set()
    broken: set[str] = set()  # names whose file is unreadable: keep their stored routine
    for path in sorted(home.routines_dir.glob("*.toml")):
        try:
            item = read_routine_file(path, home)
        except ConfigError as exc:
            report.problems.append(str(exc))
            broken.add(path.stem)
            continue
        declared.add((item.bot, item.name))
        await _apply(item, store, report)
    for routine in await store.all():
        key = (routine.bot, routine.name)
        if routine.source == "file" and key not in declared and routine.name not in broken:
            await store.remove(routine.id)
            report.removed.append(routine.name)
    for problem in report.problems:
        log.warning("routine file skipped: %s", problem)
    return report


async def _apply(item: RoutineFile, store: RoutineStore, report: ReconcileReport) -> None:
    existing = await store.find(item.bot, item.name)
    if existing is None:
        await store.create(
            item.bot,
            item.name,
            item.prompt,
            item.schedule,
            item.target,
            paused=item.paused,
            grace_seconds=item.grace_seconds,
            source="file",
            source_digest=item.digest,
            armed_at=item.written_at,
            precheck=item.precheck,
        )
        report.created.append(item.name)
        return
    if existing.source == "file" and existing.source_digest == item.digest:
        report.unchanged.append(item.name)
        return
    changes: dict[str, object] = {
        "prompt": item.prompt,
        "target": item.target,
        "paused": item.paused,
        "grace_seconds": item.grace_seconds,
        "precheck": item.precheck,
        "source": "file",
        "source_digest": item.digest,
    }
    if item.schedule != existing.schedule:
        changes["schedule"] = item.schedule
    await store.update(existing.id, armed_at=item.written_at, **changes)
    report.updated.append(item.name)
