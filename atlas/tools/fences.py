"""Where file tools may reach, and how they open what they reach without a race.

`Fence.area` names the part of the machine a resolved path is in: the vault, the bot's own
workspace, somewhere outside the Atlas home, or one of the home's own areas (settings,
databases, memory, skills, routines…). The gate (atlas/trust/policy.py) turns areas into allow,
ask or deny; the tools apply the denials again when they open a file, on the file they opened.

Opening is race-free: a path resolved once (symlinks and `..` gone) is opened folder by folder
from `/` with O_NOFOLLOW, so a symlink swapped in after the check fails the open instead of
being followed. A regular file with more than one link is refused when it is a hard link to a
file of the vault or the home's private areas (found by device and inode).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

from atlas.errors import ToolError
from atlas.sandbox.view import LINK_SCAN_TTL_S, View, inodes_under

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.tools.registry import RunContext

Area = Literal[
    "vault",
    "secret",  # the dashboard's key, run/ (sockets, one-time login links): never reached
    "workspace",
    "outside",
    "settings",  # config.toml, mcp.json, models.toml, every bots/*/bot.toml
    "mission",  # bots/*/MISSION.md
    "database",  # atlas.db*, bots/*/conversations.db*
    "plugins",  # plugins/, plugin-data/
    "own-memory",  # this bot's memory/ (and the home's USER.md, MEMORY.md, memory/)
    "memory",  # another bot's memory/
    "own-skills",  # this bot's skills/ and the home's shared skills/
    "skills",  # another bot's skills/
    "routines",
    "own-scratch",  # what Atlas tells the model to read: its spill files, job logs
    "home",  # anything else in the home (other bots' workspaces, caches, the home itself)
]
MEMORY_AREAS = ("own-memory", "memory")
SKILL_AREAS = ("own-skills", "skills")
SETTINGS_FILES = ("config.toml", "mcp.json", "models.toml")
SECRET_FILES = ("dashboard.key", "run")
UNREACHABLE_AREAS = ("vault", "secret")
HOME_MEMORY = ("USER.md", "MEMORY.md", "memory")
# Hard links: fenced trees are walked for their files' inodes (atlas/sandbox/view.py
# inodes_under, within its bounds; a walk is kept LINK_SCAN_TTL_S).
O_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # Linux: a folder fd that needs no read permission


class PathChanged(ToolError):
    """The path changed between its check and its open (a symlink swapped in)."""


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def vault_of(home: Home) -> Path:
    vault = home.settings.trust.vault
    return resolved_root(Path(vault).expanduser()) if vault else home.root / "vault"


def resolved_root(folder: Path) -> Path:
    """`folder.resolve()` for a folder the person configured (the home, the vault, a bot's
    workspace), asked on every file call: kept for the second it was asked in, since resolving
    walks every name with lstat (~2 % of a turn's CPU under load). A symlink swapped in for one
    of them is seen within a second; what is opened is still reached from `/` without
    following any link (open_folder), so a swap after the check fails the open."""
    return _resolved_in_second(folder, int(time.monotonic()))


@functools.lru_cache(maxsize=64)
def _resolved_in_second(folder: Path, _second: int) -> Path:
    return folder.resolve()


@dataclass(frozen=True)
class Fence:
    home: Path
    vault: Path
    bot: str
    workspace: Path
    view: View  # what the bot sees: anything else is a missing file (atlas/sandbox/view.py)

    @classmethod
    def for_run(cls, run: RunContext) -> Fence:
        return cls(
            home=resolved_root(run.home.root),
            vault=resolved_root(vault_of(run.home)),
            bot=run.bot.name,
            workspace=resolved_root(run.bot.workspace),
            view=View.of(run.home, run.bot),
        )

    def area(self, path: Path) -> Area:
        """The area of a resolved absolute path."""
        if inside(path, self.vault):
            return "vault"
        if inside(path, self.workspace):
            return "workspace"
        if not inside(path, self.home):
            return "outside"
        return self._home_area(path.relative_to(self.home).parts)

    def _home_area(self, parts: tuple[str, ...]) -> Area:
        if not parts:
            return "home"
        top = parts[0]
        if top in SECRET_FILES:
            return "secret"
        if len(parts) == 1 and top in SETTINGS_FILES:
            return "settings"
        if top.startswith("atlas.db"):
            return "database"
        if top in ("plugins", "plugin-data"):
            return "plugins"
        if top in HOME_MEMORY:
            return "own-memory"
        if top == "skills":
            return "own-skills"
        if top == "routines":
            return "routines"
        if top == "commands" or (top == "spill" and parts[1:2] == (self.bot,)):
            return "own-scratch"
        if top == "bots" and len(parts) >= 3:
            return self._bot_area(parts[1], parts[2], len(parts) == 3)
        return "home"

    def _bot_area(self, bot: str, entry: str, top_level: bool) -> Area:
        own = bot == self.bot
        if top_level and entry == "bot.toml":
            return "settings"
        if top_level and entry == "MISSION.md":
            return "mission"
        if entry.startswith("conversations.db"):
            return "database"
        if entry == "memory":
            return "own-memory" if own else "memory"
        if entry == "skills":
            return "own-skills" if own else "skills"
        return "home"

    # ---- what the tools refuse whatever the gate said ---------------------------------------

    def refuse_reading(self, path: Path, shown: str) -> None:
        if reason := self.unreachable(path, shown):
            raise ToolError(reason)

    def unreachable(self, path: Path, shown: str) -> str | None:
        """Why no file tool may reach this path, whatever anyone answers (None: it may)."""
        area = self.area(path)
        if area == "vault":
            return f"{shown} is inside the vault ({self.vault}), which file tools never reach"
        if area == "secret":
            return f"{shown} holds the Atlas home's own secrets, which file tools never reach"
        return None

    def refuse_writing(self, path: Path, shown: str) -> None:
        self.refuse_reading(path, shown)
        if reason := write_refusal(self.area(path), shown):
            raise ToolError(reason)

    def open_file(self, path: Path, shown: str | None = None) -> tuple[BinaryIO, os.stat_result]:
        """Open a resolved path for reading, once: in the bot's view, not in the vault, no
        symlink followed on the way, a regular file, no hard link into a fenced folder. Raises
        FileNotFoundError (a path the view hides is missing)."""
        shown = shown or str(path)
        if not self.view.sees(path):
            raise FileNotFoundError(errno.ENOENT, "no such file", shown)
        self.refuse_reading(path, shown)
        try:
            fd = open_resolved(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
        except (FileNotFoundError, ToolError):
            raise
        except OSError as exc:
            raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
        # The checks come before fdopen: fdopen of a folder raises IsADirectoryError and
        # leaves the descriptor open (one leaked per call).
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(
                    f"{shown} is a folder, not a file; list it with find_files(target='files')"
                )
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file (a pipe, socket or device)")
            self.refuse_hard_link(path, st, shown)
            f = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        return f, st

    def private_trees(self) -> list[Path]:
        """Folders and files searched from above must leave out: the vault, and the whole home
        but this bot's workspace (named entry by entry, so the workspace stays in)."""
        trees = [self.vault]
        try:
            trees += [p for p in self.home.iterdir() if p.name != "bots"]
            for bot in (self.home / "bots").iterdir():
                if bot.name != self.bot:
                    trees.append(bot)
                else:
                    trees += [p for p in bot.iterdir() if p.resolve() != self.workspace]
        except OSError:
            pass  # a home being set up: what exists is listed
        return trees

    # ---- hard links --------------------------------------------------------------------------

    def refuse_hard_link(self, path: Path, st: os.stat_result, shown: str) -> None:
        """A file with several links, opened outside the home and the vault, must not be one of
        their files under another name."""
        if st.st_nlink <= 1 or not stat.S_ISREG(st.st_mode):
            return
        if self.view.hard_link_hidden(st, path):
            raise ToolError(
                f"{shown} is a hard link to a file this bot cannot see (or may be: the folders "
                "it cannot see are too big to check); file tools do not read it"
            )
        if self.area(path) not in ("workspace", "outside"):
            return  # the file itself is in the home: the gate judged that path
        fenced = fenced_inodes(self.home, self.vault)
        if fenced is None or (st.st_dev, st.st_ino) in fenced:
            raise ToolError(
                f"{shown} is a hard link to a file in the vault or the Atlas home's private "
                "files; file tools do not read it"
            )


def write_refusal(area: Area, shown: str) -> str | None:
    """Why write_file/edit_file may never change a file in this area (None: they may ask)."""
    if area in MEMORY_AREAS:
        return (
            f"{shown} is memory: it changes only through the `memory` tool (whose checks "
            "apply), never through file tools"
        )
    if area in SKILL_AREAS:
        return (
            f"{shown} is a skill: skills change only through the `skill_manage` tool (whose "
            "checks apply), never through file tools"
        )
    if area == "settings":
        return f"{shown} is the home's own settings; the person edits it themselves"
    if area == "database":
        return f"{shown} is one of the home's databases; file tools never write it"
    if area == "plugins":
        return f"{shown} belongs to the home's plugins"
    return None


_link_scans: dict[tuple[Path, Path], tuple[float, frozenset[tuple[int, int]] | None]] = {}


def fenced_inodes(home: Path, vault: Path) -> frozenset[tuple[int, int]] | None:
    """(device, inode) of every file in the vault and the home (bots' workspaces left out: they
    are no private files). Walked only when a file with several links is opened, and kept a few
    seconds. None when there are too many entries to walk: every such file is then refused."""
    key = (home, vault)
    now = time.monotonic()
    cached = _link_scans.get(key)
    if cached and now - cached[0] < LINK_SCAN_TTL_S:
        return cached[1]
    bots = home / "bots"

    def a_workspace(folder: str) -> bool:  # bots/<name>/workspace: no private files
        path = Path(folder)
        return path.name == "workspace" and path.parent.parent == bots

    result = inodes_under([vault, home], a_workspace)
    _link_scans[key] = (now, result)
    return result


# ---- opening without a second lookup -------------------------------------------------------


def open_folder(path: Path, *, create: bool = False) -> int:
    """An fd of a resolved folder, reached from `/` one name at a time without following a
    symlink; missing folders are made when `create`. Raises PathChanged on a symlink."""
    if not path.is_absolute():
        raise ToolError(f"{path}: not an absolute path")
    flags = O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for name in path.parts[1:]:
            try:
                child = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(name, 0o777, dir_fd=fd)
                child = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                _raise_if_link(exc, fd, name, path)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _raise_if_link(exc: OSError, folder_fd: int, name: str, path: Path) -> None:
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link or exc.errno == errno.ELOOP:
        raise PathChanged(
            f"{path} changed while it was being opened (a symbolic link appeared on its "
            "path); nothing was read or written. Try again."
        ) from None


def open_resolved(
    path: Path, flags: int, mode: int = 0o666, *, create_folders: bool = False
) -> int:
    """Open a resolved path with no symlink followed anywhere on the way (see open_folder)."""
    folder = open_folder(path.parent, create=create_folders)
    try:
        return os.open(path.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
    except OSError as exc:
        _raise_if_link(exc, folder, path.name, path)
        raise
    finally:
        os.close(folder)
