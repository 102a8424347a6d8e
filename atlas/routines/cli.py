"""`atlas routines …`: list, show, run, pause, resume, history, reload, next.

Changes made here are written to the home's atlas.db; a running daemon picks them up within
`[routines] poll_seconds`. Imports stay inside the commands so `atlas --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.routines.store import Routine, RoutineStore
    from atlas.runtime import Runtime


def add_routines_parser(sub: Any) -> None:
    """Add `routines` and its actions to the `atlas` subparsers."""
    routines = sub.add_parser("routines", help="prompts run on a schedule (docs/routines.md)")
    actions = routines.add_subparsers(dest="routines_action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every routine, its schedule and next run")
    listing.add_argument("--bot", help="only this bot's routines")
    listing.add_argument("--json", action="store_true", help="print JSON")
    for action, text in (
        ("show", "one routine: its prompt, next runs and last runs"),
        ("run", "run a routine now, here, and print its answer"),
        ("pause", "stop a routine from running until resumed"),
        ("resume", "let a paused routine run again"),
        ("history", "a routine's runs, newest first"),
    ):
        parser = actions.add_parser(action, help=text)
        parser.add_argument("name", help="the routine's name or id")
        parser.add_argument("--bot", help="the bot, when several have a routine of that name")
        if action == "history":
            parser.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
            parser.add_argument("--json", action="store_true", help="print JSON")
    actions.add_parser("reload", help="read routines/*.toml again and reconcile by name")

    upcoming = actions.add_parser("next", help="the next fire times of a schedule")
    upcoming.add_argument("schedule", help='e.g. "weekdays at 9am" or "30 9 * * 1-5"')
    upcoming.add_argument("--tz", help="IANA time zone (default: the home's, else UTC)")
    upcoming.add_argument("--from", dest="start", help="ISO date-time to count from (default now)")
    upcoming.add_argument("--count", type=int, default=5, help="how many (default 5)")
    upcoming.add_argument("--json", action="store_true", help="print a JSON list")
    routines.set_defaults(func=routines_main)


def routines_main(args: argparse.Namespace) -> int:
    """Run one `atlas routines` action; the exit code."""
    if args.routines_action == "next":
        return print_next(args.schedule, args.tz, args.start, args.count, args.json, _root(args))
    from atlas.home import Home

    home = Home(_root(args))
    return asyncio.run(_with_store(home, args))


def _root(args: argparse.Namespace) -> Path:
    from atlas.home import default_home

    home = getattr(args, "home", None)
    return Path(home).expanduser() if home else default_home()


def print_next(
    schedule: str,
    tz: str | None,
    start: str | None,
    count: int,
    as_json: bool,
    root: Path | None = None,
    out: TextIO | None = None,
) -> int:
    """Print the next fire times, one ISO date-time with offset per line. Needs no home."""
    out = out or sys.stdout
    from atlas.routines.schedule import ScheduleError, next_fire_times, zone

    try:
        zone_name = tz or _home_zone(root)
        tzinfo = zone(zone_name)
        begin = datetime.fromisoformat(start) if start else None
        times = next_fire_times(schedule, tzinfo, begin, max(1, count))
    except ValueError as exc:
        print(f"atlas: --from {start!r} is not an ISO date-time ({exc})", file=sys.stderr)
        return 2
    except ScheduleError as exc:
        print(f"atlas: {exc}", file=sys.stderr)
        return 2
    stamps = [t.isoformat() for t in times]
    print(json.dumps(stamps) if as_json else "\n".join(stamps), file=out)
    return 0


def _home_zone(root: Path | None) -> str:
    """The home's time zone when there is a readable home, else UTC."""
    if root is None or not (root / "config.toml").exists():
        return "UTC"
    from atlas.config import load_settings

    return load_settings(root / "config.toml").timezone


async def _with_store(home: Home, args: argparse.Namespace) -> int:
    from atlas.store.home_engines import HomeEngines

    engines = await HomeEngines.open(home)  # atlas.db, or the home's PostgreSQL database
    try:
        store = engines.routines
        action = args.routines_action
        if action == "list":
            return await print_list(home, store, args.bot, args.json)
        if action == "reload":
            from atlas.routines.files import reconcile_files

            report = await reconcile_files(home, store)
            print(report.summary())
            print(_daemon_note(home))
            return 1 if report.problems else 0
        routine = await _find(store, args.name, args.bot)
        if action == "show":
            return await print_show(home, store, routine)
        if action == "history":
            return await print_history(store, routine, args.limit, args.json)
        if action in ("pause", "resume"):
            await store.update(routine.id, paused=action == "pause")
            print(f"{action}d {routine.bot}/{routine.name}. {_daemon_note(home)}")
            return 0
        return await run_in_terminal(home, store, routine)
    finally:
        await engines.close()


async def _find(store: RoutineStore, key: str, bot: str | None) -> Routine:
    from atlas.errors import AtlasError

    routine = await store.find(bot, key)
    if routine is None:
        whose = f" of bot {bot}" if bot else ""
        raise AtlasError(f"no routine{whose} named {key!r} (see `atlas routines list`)")
    return routine


def _daemon_note(home: Home) -> str:
    seconds = home.settings.routines.poll_seconds
    return f"A running daemon picks this up within {seconds:.0f} s."


def _next_run(home: Home, routine: Routine, count: int = 1) -> list[datetime]:
    from atlas.routines.schedule import ScheduleError, next_fire_times, parse_schedule

    if routine.paused:
        return []
    tz = home.settings.timezone
    now = datetime.now(_zone(tz))
    try:
        schedule = parse_schedule(routine.schedule, tz, anchor=routine.armed_at)
    except ScheduleError:
        return []
    return [t for t in next_fire_times(schedule, tz, now, count) if t > now]


def _zone(name: str):  # type: ignore[no-untyped-def]
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


async def print_list(
    home: Home, store: RoutineStore, bot: str | None, as_json: bool, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    routines = await store.all(bot)
    rows = []
    for routine in routines:
        runs = await store.runs(routine.id, limit=1)
        upcoming = _next_run(home, routine)
        rows.append(
            {
                "id": routine.id,
                "bot": routine.bot,
                "name": routine.name,
                "schedule": routine.schedule,
                "paused": routine.paused,
                "next": upcoming[0].isoformat() if upcoming else None,
                "target": str(routine.target) if routine.target else None,
                "last_status": runs[0].status if runs else None,
                "source": routine.source,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2), file=out)
        return 0
    if not rows:
        files = sorted(home.routines_dir.glob("*.toml"))
        if files:  # a fresh home: the files are read at the next `atlas run` or reload
            print(
                f"no routines loaded yet; {home.routines_dir} has {len(files)} file(s): "
                "`atlas routines reload` (or `atlas run`) reads them",
                file=out,
            )
        else:
            print("no routines (add one from a chat, or a file in routines/)", file=out)
    for row in rows:
        state = "paused" if row["paused"] else f"next {row['next'] or 'none'}"
        last = f", last {row['last_status']}" if row["last_status"] else ""
        print(
            f"{row['id']:>3}  {row['bot']}/{row['name']}  [{row['schedule']}]  {state}{last}"
            f"  → {row['target'] or 'no target'}",
            file=out,
        )
    return 0


async def print_show(
    home: Home, store: RoutineStore, routine: Routine, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    grace = f"{routine.grace_seconds} s" if routine.grace_seconds is not None else "default"
    upcoming = _next_run(home, routine, 3)
    lines = [
        f"{routine.bot}/{routine.name} (id {routine.id}, from {routine.source})",
        f"schedule: {routine.schedule} ({home.settings.timezone})",
        f"state:    {'paused' if routine.paused else 'active'}; grace {grace}",
        f"reports:  {routine.target or 'nowhere (history only)'}",
        "next:     " + (", ".join(t.isoformat() for t in upcoming) or "none"),
        "prompt:",
        *[f"  {line}" for line in routine.prompt.splitlines()],
        "last runs:",
    ]
    runs = await store.runs(routine.id, limit=5)
    lines += [f"  {_run_line(run)}" for run in runs] or ["  none yet"]
    print("\n".join(lines), file=out)
    return 0


def _run_line(run: Any) -> str:
    tokens = run.input_tokens + run.output_tokens
    detail = run.error or run.delivery
    return f"#{run.id} {run.started_at[:19]} {run.outcome:<11} {run.trigger:<8} {tokens:>6} tok  {detail}"


async def print_history(
    store: RoutineStore, routine: Routine, limit: int, as_json: bool, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    runs = await store.runs(routine.id, limit=max(1, limit))
    if as_json:
        print(json.dumps([run.__dict__ for run in runs], indent=2), file=out)
    elif not runs:
        print(f"{routine.name} has not run yet", file=out)
    else:
        print("\n".join(_run_line(run) for run in runs), file=out)
    return 0


class _PrintChannel:
    """Delivers a routine's answer to this terminal (the CLI runs no chat channels)."""

    name = "terminal"
    streams = False

    def __init__(self, out: TextIO) -> None:
        self.out = out

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def typing(self, address: Any) -> None: ...
    async def stream(self, address: Any, text: str) -> None: ...
    async def show_tool_call(self, address: Any, call: Any) -> None: ...

    async def send(self, address: Any, text: str, files: list[Path] | None = None) -> None:
        print(text, file=self.out)

    async def ask(self, address: Any, question: str, choices: list[str]) -> str | None:
        return None


async def run_in_terminal(
    home: Home,
    store: RoutineStore,
    routine: Routine,
    *,
    runtime: Runtime | None = None,
    out: TextIO | None = None,
) -> int:
    """Run a routine now in this process; its answer is printed, and the run recorded."""
    out = out or sys.stdout
    from dataclasses import replace

    from atlas.dispatch import Dispatcher
    from atlas.errors import AtlasError
    from atlas.routines.runner import execute_run
    from atlas.routines.store import Target
    from atlas.runtime import Runtime

    if await store.running(routine.id):
        raise AtlasError(f"routine {routine.name!r} is running already; wait for it to finish")
    own_runtime = runtime is None
    if runtime is None:
        from atlas.store.home_engines import HomeEngines

        runtime = Runtime(home, engines=await HomeEngines.open(home))
    dispatcher = Dispatcher(runtime, {"terminal": _PrintChannel(out)})
    here = replace(routine, target=Target("terminal", "cli"))
    tz = _zone(home.settings.timezone)
    try:
        run_id = await store.start_run(routine, "manual", datetime.now(tz))
        result = await execute_run(
            here,
            run_id,
            None,
            dispatcher=dispatcher,
            store=store,
            time_limit=home.settings.routines.time_limit,
            tz=tz,
        )
    finally:
        await dispatcher.shutdown()
        if own_runtime:
            await runtime.close()
    if result.status == "silent":
        print("(the run answered [SILENT]: nothing to tell)", file=out)
    if result.status == "skipped":
        print("(the pre-check found nothing to report: the model was not called)", file=out)
    print(f"run {run_id}: {result.status}", file=sys.stderr)
    return 0 if result.status in ("ok", "silent", "skipped") else 1
