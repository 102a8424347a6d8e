"""The plugin SDK: channels and executors register through Python entry points.

A package adds an executor by naming its class in its own pyproject.toml:

    [project.entry-points."atlas.executors"]
    aider = "atlas_aider:AiderExecutor"

and a channel likewise under `atlas.channels`. Atlas's built-in ones register the same way
(pyproject.toml). Each plugin class declares the SDK version it was written for
(`sdk_version`); one Atlas does not speak is refused with a message naming the package.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from atlas.errors import AtlasError

log = logging.getLogger(__name__)

# The SDK versions this Atlas speaks, per entry-point group (docs/executors.md, Plugins).
CHANNELS_GROUP, EXECUTORS_GROUP = "atlas.channels", "atlas.executors"
SDK_VERSIONS: dict[str, int] = {CHANNELS_GROUP: 1, EXECUTORS_GROUP: 2}


class PluginError(AtlasError):
    """A plugin could not be loaded: its entry point, its class or its SDK version."""


@dataclass(frozen=True)
class LoadedPlugin:
    name: str  # the entry point's name: `claude-code`, `telegram`
    group: str
    target: Any  # the class the entry point names
    source: str  # "package==version" (or the entry point's value when unknown)


def _source(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    if dist is None:
        return point.value
    return f"{dist.metadata['Name']}=={dist.version}"


def load_plugins(group: str) -> dict[str, LoadedPlugin]:
    """Every plugin of `group`, by entry-point name. A plugin that fails to import, or that
    speaks another SDK version, is logged and left out: one broken package never stops Atlas."""
    plugins, errors = load_plugins_with_errors(group)
    for error in errors:
        log.warning("plugins: %s", error)
    return plugins


def load_plugin(group: str, name: str) -> LoadedPlugin:
    """The one plugin of `group` registered as `name`, loaded alone (a channel's module is
    imported only when some bot configures it). PluginError says why it cannot be had."""
    wanted = SDK_VERSIONS[group]
    points = [p for p in entry_points(group=group) if p.name == name]
    if not points:
        known = ", ".join(sorted(p.name for p in entry_points(group=group))) or "none"
        raise PluginError(f"no {group} plugin named {name!r} is installed (installed: {known})")
    point = points[0]
    source = _source(point)
    try:
        target = point.load()
    except Exception as exc:  # a third-party import can raise anything; named, not fatal
        raise PluginError(f"{group} {name} ({source}) did not load: {exc!r}") from exc
    version = getattr(target, "sdk_version", None)
    if version != wanted:
        raise PluginError(
            f"{group} {name} ({source}) is written for SDK version {version}, "
            f"this Atlas speaks version {wanted}: update the package"
        )
    return LoadedPlugin(name, group, target, source)


def load_plugins_with_errors(group: str) -> tuple[dict[str, LoadedPlugin], list[str]]:
    """As `load_plugins`, with the reason each one left out was refused (for `atlas doctor`)."""
    wanted = SDK_VERSIONS.get(group)
    if wanted is None:
        raise PluginError(f"unknown plugin group {group!r} (known: {', '.join(SDK_VERSIONS)})")
    plugins: dict[str, LoadedPlugin] = {}
    errors: list[str] = []
    for point in sorted(entry_points(group=group), key=lambda p: p.name):
        source = _source(point)
        try:
            target = point.load()
        except Exception as exc:  # a third-party import can raise anything; named, not fatal
            errors.append(f"{group} {point.name} ({source}) did not load: {exc!r}")
            continue
        version = getattr(target, "sdk_version", None)
        if version != wanted:
            errors.append(
                f"{group} {point.name} ({source}) is written for SDK version {version}, "
                f"this Atlas speaks version {wanted}: update the package"
            )
            continue
        if point.name in plugins:
            errors.append(
                f"{group} {point.name} is registered twice ({plugins[point.name].source} and "
                f"{source}); the first is kept"
            )
            continue
        plugins[point.name] = LoadedPlugin(point.name, group, target, source)
    return plugins, errors


def installed_names(group: str) -> list[str]:
    """The names registered under `group`, without importing any of them."""
    return sorted({point.name for point in entry_points(group=group)})


@dataclass(frozen=True)
class PluginReport:
    """One installed entry point as `atlas plugins` shows it."""

    name: str
    group: str
    source: str
    sdk_version: object  # what its class declares (None: nothing, or it did not load)
    problem: str | None  # why it cannot be used; None when it loads and speaks our version


def installed_plugins(group: str) -> list[PluginReport]:
    """Every entry point of `group`, loaded, with the SDK version it declares and why it
    cannot be used (did not load, another SDK version, registered twice)."""
    wanted = SDK_VERSIONS[group]
    reports: list[PluginReport] = []
    seen: set[str] = set()
    for point in sorted(entry_points(group=group), key=lambda p: p.name):
        source = _source(point)
        try:
            target = point.load()
        except Exception as exc:  # a third-party import can raise anything; named, not fatal
            reports.append(PluginReport(point.name, group, source, None, f"did not load: {exc!r}"))
            continue
        version = getattr(target, "sdk_version", None)
        problem = None
        if version != wanted:
            problem = (
                f"written for SDK version {version}, this Atlas speaks version {wanted}: "
                "update the package"
            )
        elif point.name in seen:
            problem = "registered twice: another package's is used"
        seen.add(point.name)
        reports.append(PluginReport(point.name, group, source, version, problem))
    return reports


def why_unavailable(group: str, name: str) -> str:
    """Why no usable plugin of `group` is registered as `name`: none installed, or the one
    installed did not load or speaks another SDK version (naming both versions)."""
    try:
        plugin = load_plugin(group, name)
    except PluginError as exc:
        if not any(p.name == name for p in entry_points(group=group)):
            return f"no installed package registers it ({group} entry point)"
        return str(exc)
    return f"{plugin.source} registers it as {plugin.target!r}, which is not a usable {group} class"
