"""`atlas plugins`: every installed plugin (the `atlas.channels` and `atlas.executors` entry
points, Atlas's own included), the package that registers it, the SDK version it is written
for, and whether this home uses it, and why not.

    atlas.executors (this Atlas speaks SDK version 2)
      claude-code  atlas==0.1.0  SDK 2  enabled: [executors.claude-code] in config.toml
      codex        atlas==0.1.0  SDK 2  not enabled: config.toml has no [executors.codex] table

Loading a plugin imports its module (its SDK version is a class attribute), so this takes as
long as importing the channel libraries; nothing is started.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from atlas.plugins import CHANNELS_GROUP, EXECUTORS_GROUP, SDK_VERSIONS, installed_plugins

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.plugins import PluginReport


@dataclass(frozen=True)
class PluginLine:
    group: str
    name: str
    package: str
    sdk_version: object
    enabled: bool
    why: str  # what enables it, or why it is not enabled


def add_plugins_parser(sub: Any) -> None:
    plugins = sub.add_parser(
        "plugins", help="installed channel and executor plugins, their SDK version, enabled or not"
    )
    plugins.add_argument("--json", action="store_true", help="print JSON")
    plugins.set_defaults(func=plugins_main)


def plugins_main(args: argparse.Namespace) -> int:
    from atlas.home import Home, default_home

    root = Path(args.home).expanduser() if getattr(args, "home", None) else default_home()
    home = Home(root) if (root / "config.toml").exists() else None
    lines = plugin_lines(home, root)
    print_lines(lines, args.json)
    return 0


def plugin_lines(home: Home | None, root: Path) -> list[PluginLine]:
    """A line for every installed plugin of every group."""
    lines = []
    for group in (CHANNELS_GROUP, EXECUTORS_GROUP):
        for report in installed_plugins(group):
            enabled, why = _verdict(report, home, root)
            lines.append(
                PluginLine(group, report.name, report.source, report.sdk_version, enabled, why)
            )
    return lines


def _verdict(report: PluginReport, home: Home | None, root: Path) -> tuple[bool, str]:
    if report.problem:
        return False, f"refused: {report.problem}"
    if home is None:
        return False, f"no home at {root} (`atlas init`, or --home)"
    if report.group == EXECUTORS_GROUP:
        settings = home.settings.executors.get(report.name)
        if settings is None:
            return False, f"config.toml has no [executors.{report.name}] table"
        if not settings.enabled:
            return False, f"set enabled = true under [executors.{report.name}] in config.toml"
        return True, f"[executors.{report.name}] in config.toml"
    bots = [
        name
        for name, bot in sorted(home.bots.items())
        if isinstance(raw := bot.settings.channels.get(report.name), dict)
        and raw.get("enabled", True) is not False
    ]
    if not bots:
        return False, f"no bot.toml has [channels.{report.name}]"
    return True, f"[channels.{report.name}] of bot(s) {', '.join(bots)}"


def print_lines(lines: list[PluginLine], as_json: bool, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if as_json:
        json.dump([asdict(line) for line in lines], out, indent=2, default=str)
        out.write("\n")
        return
    for group in (CHANNELS_GROUP, EXECUTORS_GROUP):
        print(f"{group} (this Atlas speaks SDK version {SDK_VERSIONS[group]})", file=out)
        mine = [line for line in lines if line.group == group]
        if not mine:
            print("  none installed", file=out)
            continue
        name_width = max(len(line.name) for line in mine)
        package_width = max(len(line.package) for line in mine)
        for line in mine:
            sdk = "SDK ?" if line.sdk_version is None else f"SDK {line.sdk_version}"
            state = "enabled" if line.enabled else "not enabled"
            print(
                f"  {line.name:<{name_width}}  {line.package:<{package_width}}  {sdk}  "
                f"{state}: {line.why}",
                file=out,
            )
