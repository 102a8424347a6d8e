"""Which browser browser_exec drives: `[browser] chrome` when it is set, else the first Chrome,
Edge or Chromium found on PATH, then in the platform's usual places.

Asked in every model round (browser_exec's availability), so a search is kept a minute: a
browser installed while the daemon runs is found soon enough. `atlas doctor` names what it finds.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Looked up on PATH, in this order: Chromium first (what Debian packages), then Chrome, then Edge.
PATH_NAMES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "microsoft-edge",
    "microsoft-edge-stable",
    "msedge",
)
LINUX_PLACES = (
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/lib/chromium/chromium",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
    "/opt/google/chrome/chrome",
    "/usr/bin/microsoft-edge",
    "/opt/microsoft/msedge/msedge",
    "/snap/bin/chromium",  # last: a snap needs snapd, which the sandbox cannot reach
)
MAC_APPS = (
    "Google Chrome.app/Contents/MacOS/Google Chrome",
    "Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
    "Chromium.app/Contents/MacOS/Chromium",
)
WINDOWS_APPS = (
    "Google/Chrome/Application/chrome.exe",
    "Microsoft/Edge/Application/msedge.exe",
    "Chromium/Application/chrome.exe",
)
WINDOWS_ROOTS = ("PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA")
# What `atlas init` wrote before the browser was looked for: where nothing is there, it means
# "look", not an override that is wrong.
OLD_DEFAULT = "/usr/bin/chromium"
RECHECK_SECONDS = 60


@dataclass(frozen=True)
class Browser:
    path: Path
    found_by: str  # "[browser] chrome", "PATH (google-chrome)", "the usual place"

    @property
    def kind(self) -> str:
        name = str(self.path).lower()
        if "edge" in name:
            return "Microsoft Edge"
        if "chrome" in name and "chromium" not in name:
            return "Google Chrome"
        return "Chromium"

    def describe(self) -> str:
        return f"{self.kind} at {self.path} ({self.found_by})"


class BrowserNotFound(Exception):
    """No browser to drive; the message says where Atlas looked, or which setting is wrong."""


def find_browser(
    setting: str,
    config_path: Path | str = "config.toml",
    *,
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> Browser:
    """The browser to drive, or BrowserNotFound saying why there is none."""
    env = os.environ if environ is None else environ
    key = (setting, str(config_path), env.get("PATH"), platform or sys.platform)
    minute = int(time.monotonic() // RECHECK_SECONDS)
    if environ is not None:  # a test's own environment: nothing cached
        return _find(*key, env)
    found = _find_cached(*key, minute)
    if isinstance(found, BrowserNotFound):
        raise BrowserNotFound(*found.args)
    return found


@functools.lru_cache(maxsize=8)
def _find_cached(
    setting: str, config_path: str, path: str | None, platform: str, _minute: int
) -> Browser | BrowserNotFound:
    """The search's answer, kept for the minute: "none found" too (browser_exec's availability
    is asked every model round, and a search walks PATH and the usual places)."""
    try:
        return _find(setting, config_path, path, platform, os.environ)
    except BrowserNotFound as exc:
        return exc


def _find(
    setting: str, config_path: str, path: str | None, platform: str, env: Mapping[str, str]
) -> Browser:
    setting = setting.strip()
    if setting and not (setting == OLD_DEFAULT and not _is_executable(Path(OLD_DEFAULT))):
        return _configured(setting, config_path, path)
    for name in PATH_NAMES:
        if found := shutil.which(name, path=path):
            return Browser(Path(found), f"PATH ({name})")
    places = usual_places(platform, env)
    for place in places:
        if _is_executable(place):
            return Browser(place, "the usual place")
    example = f" such as {places[0]}" if places else ""
    raise BrowserNotFound(
        f"no Chrome, Edge or Chromium on PATH ({', '.join(PATH_NAMES[:4])}, …) nor in the usual "
        f"places{example}; install one, or set [browser] chrome in {config_path}"
    )


def _configured(setting: str, config_path: str, path: str | None) -> Browser:
    """`[browser] chrome`: a path, or a command name looked up on PATH."""
    candidate = Path(setting).expanduser()
    if os.sep not in setting and "/" not in setting and (found := shutil.which(setting, path=path)):
        return Browser(Path(found), "[browser] chrome")
    if _is_executable(candidate):
        return Browser(candidate, "[browser] chrome")
    what = "not an executable file" if candidate.exists() else "no such file"
    raise BrowserNotFound(
        f'[browser] chrome = "{setting}" in {config_path}: {what}; point it at Chrome, Edge or '
        "Chromium, or remove the line to let Atlas look for one"
    )


def usual_places(platform: str, env: Mapping[str, str]) -> list[Path]:
    """Where each platform's installers put Chrome, Edge and Chromium."""
    if platform == "darwin":
        roots = [Path("/Applications"), Path(env.get("HOME", "~")).expanduser() / "Applications"]
        return [root / app for app in MAC_APPS for root in roots]
    if platform.startswith("win"):
        roots = [Path(env[name]) for name in WINDOWS_ROOTS if env.get(name)]
        return [root / app for app in WINDOWS_APPS for root in roots] or [
            Path("C:/Program Files") / WINDOWS_APPS[0]
        ]
    return [Path(place) for place in LINUX_PLACES]


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def sandbox_folders(browser: Path, hidden: tuple[Path, ...]) -> tuple[Path, ...]:
    """The folders the sandbox must show (read-only) for the browser to start there: where the
    executable is named and where its links lead (Chrome's own folder holds its libraries).
    The root is visible already, but not the machine's /tmp (the sandbox has its own); a
    browser inside a hidden folder (the Atlas home, a credentials folder) is refused."""
    folders: list[Path] = []
    for path in (browser, Path(os.path.realpath(browser))):
        folder = Path(os.path.realpath(path.parent))
        for secret in hidden:
            real_secret = Path(os.path.realpath(secret))
            if folder == real_secret or real_secret in folder.parents:
                raise BrowserNotFound(
                    f"the browser {browser} is in {secret}, which the sandbox hides; install "
                    "it elsewhere, or set [browser] chrome to another one"
                )
        if folder == Path(os.path.realpath("/tmp")) or folder == Path("/"):
            raise BrowserNotFound(
                f"the browser {browser} lies directly in {folder}, which the sandbox does not "
                "show; move it into a folder of its own"
            )
        if folder not in folders:
            folders.append(folder)
    return tuple(folders)
