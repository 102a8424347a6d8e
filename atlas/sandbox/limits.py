"""Resource limits for every sandbox (docs/sandbox.md, "Limits").

Each sandbox gets a pids limit, a memory limit (which counts its tmpfs: shmem pages are charged
to the cgroup of whoever wrote them), a CPU share and a size on its private /tmp and /dev/shm.
The strongest mechanism this machine allows is found once per process:

- `cgroup2`: the process's own cgroup v2 offers memory, pids and cpu (a delegated cgroup);
- `cgroup1`: the v1 hierarchies pids, memory and cpu are writable (root on a hybrid machine);
- `rlimits`: neither: RLIMIT_NPROC (it does not bind uid 0), RLIMIT_FSIZE and the OOM killer's
  choice (oom_score_adj 1000) only.

Whatever the mechanism: `bwrap --size` bounds /tmp and /dev/shm, RLIMIT_FSIZE bounds one file
to the workspace budget, and every sandboxed process has oom_score_adj 1000 (killed first).
A command joins its cgroup before it runs: a `sh` in front of bwrap writes `0` (itself) into
each hierarchy's cgroup.procs with its builtin `echo`, sets the rlimits, then execs bwrap
(`wrapper`): no process besides bwrap's own. A released group, once empty, is reused by a later
command with the same limits (group_pool.py): no mkdir and rmdir per command.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from atlas.sandbox import group_pool

if TYPE_CHECKING:
    from atlas.config import SandboxSettings

log = logging.getLogger(__name__)

Mechanism = Literal["cgroup2", "cgroup1", "rlimits"]
CONTROLLERS = ("pids", "memory", "cpu")
GROUPS_FOLDER = "atlas-sandboxes"
COMMAND_OOM_SCORE = 1000  # a contained command is the OOM killer's first choice
DAEMON_OOM_SCORE = -900  # the daemon's own processes, where this process may lower it
MB = 1024 * 1024

# In front of bwrap: oom score, rlimits, join the cgroup (each cgroup.procs given before `--`:
# `0` is the writer itself, in v1 and v2 alike), then bwrap. dash's `ulimit -f` counts
# 512-byte blocks, `-p` processes.
WRAPPER = """o=$1 f=$2 p=$3; shift 3
echo "$o" > /proc/self/oom_score_adj
ulimit -f "$f" || exit 125
if [ "$p" != 0 ]; then ulimit -p "$p" || exit 125; fi
while [ "$1" != -- ]; do
  echo 0 > "$1" || { echo "atlas: cannot join the sandbox's cgroup $1" >&2; exit 125; }
  shift
done
shift
exec "$@"
"""


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use ([sandbox] in config.toml)."""

    max_processes: int = 1024  # processes and threads
    max_memory_mb: int = 2048  # including its /tmp and /dev/shm
    tmp_max_mb: int = 512  # each of /tmp and /dev/shm
    cpu_weight: int = 50  # against the daemon's 100 (cgroup v2 weight; v1 shares = x 10.24)
    workspace_max_mb: int = 10240  # the workspace's budget; also the largest file written


def limits_of(settings: SandboxSettings) -> Limits:
    return Limits(
        max_processes=settings.max_processes,
        max_memory_mb=settings.max_memory_mb,
        tmp_max_mb=settings.tmp_max_mb,
        cpu_weight=settings.cpu_weight,
        workspace_max_mb=settings.workspace_max_mb,
    )


@dataclass(frozen=True)
class Group:
    """One sandbox's cgroup: a folder per v1 hierarchy, or one v2 folder."""

    folders: tuple[Path, ...]
    limits: Limits | None = field(default=None, compare=False)  # as written: reused for these
    lease: int = field(default=0, compare=False)  # which handing out of the group this is

    def procs(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders]


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def _mounts() -> dict[str, Path]:
    """controller (or "" for cgroup2) -> where its hierarchy is mounted (root-mounted only)."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        root, point = fields[3], Path(fields[4])
        fstype, options = fields[-3], fields[-1].split(",")
        if root != "/":
            continue
        if fstype == "cgroup2":
            found.setdefault("", point)
        elif fstype == "cgroup":
            for name in CONTROLLERS:
                if name in options:
                    found.setdefault(name, point)
    return found


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK)


def _v2_parent(
    mounts: dict[str, Path], own: dict[str, str], wanted: tuple[str, ...] = CONTROLLERS
) -> Path | None:
    """The delegated v2 folder sandboxes go under, controllers enabled; None if there is none.
    The no-internal-process rule: this process moves into a leaf (`atlas-daemon`) first.
    `wanted`: the controllers it needs (tests run it with those a machine can enable)."""
    if "" not in mounts or "" not in own:
        return None
    folder = mounts[""] / own[""].lstrip("/")
    controllers = set((folder / "cgroup.controllers").read_text().split())
    if not set(wanted) <= controllers or not _writable(folder):
        return None
    parent = folder / GROUPS_FOLDER
    try:
        enable = " ".join(f"+{name}" for name in wanted)
        enabled = set((folder / "cgroup.subtree_control").read_text().split())
        if not set(wanted) <= enabled:
            daemon = folder / "atlas-daemon"
            daemon.mkdir(exist_ok=True)
            (daemon / "cgroup.procs").write_text(str(os.getpid()))
            (folder / "cgroup.subtree_control").write_text(enable)
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text(enable)
        _try_a_group(parent)
    except OSError as exc:
        log.info("sandbox limits: cgroup v2 at %s not usable (%s)", folder, exc)
        return None
    return parent


def _try_a_group(parent: Path) -> None:
    """Create and remove a group under `parent`: OSError where this process may not."""
    trial = parent / f"trial-{os.getpid()}"
    trial.mkdir()
    trial.rmdir()


def _v1_parents(mounts: dict[str, Path], own: dict[str, str]) -> tuple[Path, ...] | None:
    parents = []
    for name in CONTROLLERS:
        if name not in mounts or name not in own:
            return None
        folder = mounts[name] / own[name].lstrip("/")
        if not _writable(folder):
            return None
        parent = folder / GROUPS_FOLDER
        if parent in parents:
            continue  # hierarchies mounted together (`pids,memory`): one folder, joined once
        try:  # writable on paper is not enough (inside another user namespace it is not)
            parent.mkdir(exist_ok=True)
            _try_a_group(parent)
        except OSError as exc:
            log.info("sandbox limits: cgroup v1 %s not usable (%s)", parent, exc)
            return None
        parents.append(parent)
    return tuple(parents)


@functools.cache
def _detect() -> tuple[Mechanism, tuple[Path, ...]]:
    try:
        mounts, own = _mounts(), _own_cgroups()
    except OSError as exc:
        log.info("sandbox limits: cannot read cgroups (%s)", exc)
        return "rlimits", ()
    v2 = _v2_parent(mounts, own)
    if v2 is not None:
        return "cgroup2", (v2,)
    v1 = _v1_parents(mounts, own)
    if v1 is not None:
        return "cgroup1", v1
    return "rlimits", ()


def mechanism() -> Mechanism:
    return _detect()[0]


def describe(limits: Limits | None = None) -> str:
    """For `atlas doctor`: which mechanism holds each limit here."""
    limits = limits or Limits()
    kind, _ = _detect()
    sizes = f"/tmp and /dev/shm {limits.tmp_max_mb} MB each (bwrap --size)"
    if kind == "rlimits":
        nproc = "no process limit as root" if os.geteuid() == 0 else "RLIMIT_NPROC"
        return (
            f"limits by rlimits only ({nproc}; no memory or CPU limit: commands are killed first "
            f"by the OOM killer); {sizes}"
        )
    return (
        f"limits by {kind}: {limits.max_processes} processes, {limits.max_memory_mb} MB memory, "
        f"CPU weight {limits.cpu_weight}; {sizes}"
    )


_counter = itertools.count()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


AUTO_GRACE_SECONDS = 60.0  # an unreleased group is joined within this of its creation
_auto: dict[Path, float] = {}  # groups nobody releases (sandbox_argv's own): swept once empty
_state = threading.Lock()  # _auto and _released: the cgroup worker sweeps (group_pool.py)


def create_group(limits: Limits, *, released_by_caller: bool = True) -> Group | None:
    """A cgroup with the limits set, or None under `rlimits`: one made ahead by the cgroup
    worker (atlas/sandbox/group_pool.py), else made now. Without `released_by_caller`, a sweep
    removes it once it is empty after its grace."""
    if _detect()[0] == "rlimits":
        return None
    group = group_pool.take(limits, make_group) or make_group(limits)
    if group is not None:
        group = replace(group, lease=next(_leases))
        with _state:
            if released_by_caller:
                _out[group.folders] = group.lease
            else:
                for folder in group.folders:
                    _auto[folder] = time.monotonic()
    return group


def make_group(limits: Limits) -> Group | None:
    """A new cgroup with the limits written (no sweep: the cgroup worker sweeps)."""
    kind, parents = _detect()
    if kind == "rlimits":
        return None
    # The pid namespace too: pids repeat across namespaces (a nested sandbox's Atlas is pid 2).
    name = f"{os.getpid()}-{_pid_namespace()}-{next(_counter)}-{secrets.token_hex(3)}"
    folders = []
    for parent in parents:
        folder = parent / name
        folder.mkdir()
        folders.append(folder)
        for file, value, optional in _limit_files(kind, folder, limits):
            try:
                _write(folder / file, value)
            except OSError:
                if not optional:
                    raise
    return Group(tuple(folders), limits)


def _limit_files(kind: Mechanism, folder: Path, limits: Limits) -> list[tuple[str, str, bool]]:
    """(file, value, optional) of the limits a group's folder holds; optional: swap accounting
    may be off."""
    memory = str(limits.max_memory_mb * MB)
    if kind == "cgroup2":
        return [
            ("pids.max", str(limits.max_processes), False),
            ("memory.max", memory, False),
            ("memory.swap.max", "0", True),
            ("cpu.weight", str(limits.cpu_weight), False),
        ]
    if (folder / "pids.max").exists():
        return [("pids.max", str(limits.max_processes), False)]
    if (folder / "memory.limit_in_bytes").exists():
        return [
            ("memory.limit_in_bytes", memory, False),
            ("memory.memsw.limit_in_bytes", memory, True),
        ]
    if (folder / "cpu.shares").exists():
        return [("cpu.shares", str(max(2, limits.cpu_weight * 1024 // 100)), False)]
    return []


def _gone(exc: OSError) -> bool:
    """A group's file read as its folder is removed: ENOENT, or ENODEV once the kernel has
    begun taking the cgroup down (seen on v1 between `exists()` and the read)."""
    return exc.errno in (errno.ENOENT, errno.ENODEV)


def _empty(folder: Path) -> bool:
    """No process in the folder (v1's `tasks` too: every thread), or the folder gone (False)."""
    try:
        if (folder / "cgroup.procs").read_text().strip():
            return False
        tasks = folder / "tasks"
        return not (tasks.exists() and tasks.read_text().strip())
    except OSError as exc:
        if _gone(exc):
            return False
        raise


def _rewrite_limits(group: Group, limits: Limits) -> None:
    """Write each limit whose file holds another value (only those): a reused group holds
    exactly `limits`."""
    kind, _ = _detect()
    for folder in group.folders:
        for file, value, optional in _limit_files(kind, folder, limits):
            try:
                if (folder / file).read_text().strip() != value:
                    _write(folder / file, value)
            except OSError:
                if not optional:
                    raise


def recycle(group: Group) -> None:
    """A released group (its processes killed at release): back to the ready groups for its
    limits once it is empty, its limits checked; removed instead while anything is still in it
    (a group with a live process is never reused), or when enough are ready already."""
    limits = group.limits
    if limits is not None and all(_empty(folder) for folder in group.folders):
        try:
            _rewrite_limits(group, limits)
        except OSError as exc:
            log.info("sandbox limits: a released group is not reused (%s)", exc)
        else:
            if group_pool.give_back(limits, group):
                return
    remove_folders(group.folders)


def _members(folder: Path) -> list[int]:
    try:
        return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
    except OSError as exc:
        if _gone(exc):
            return []
        raise


_released: set[Path] = set()  # groups released while their processes were still exiting
# Groups handed out to a caller who releases them: released once only, for a reused group may
# be another command's by the time a second release came.
_out: dict[tuple[Path, ...], int] = {}  # folders -> the lease now out
_leases = itertools.count(1)


def _kill(folder: Path) -> None:
    """SIGKILL whatever is in `folder` (cgroup.kill where the kernel has it)."""
    pids = _members(folder)
    if pids:
        kill = folder / "cgroup.kill"
        if kill.exists():
            _write(kill, "1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _kill_and_remove(folder: Path) -> bool:
    """SIGKILL what is in `folder`, then remove it; False while processes are still exiting."""
    _kill(folder)
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False  # busy: a killed process takes a moment to leave; the next sweep removes it
    return True


def remove_folders(folders: tuple[Path, ...]) -> None:
    """Remove a released group's folders (at once, or at a later sweep while still busy)."""
    for folder in folders:
        if not _kill_and_remove(folder):
            with _state:
                _released.add(folder)


def release(group: Group | None) -> None:
    """Kill whatever is still in the group, at once; then the cgroup worker (group_pool.py)
    gives it back for reuse once empty, or removes it (`recycle`): a command's result does not
    wait for its sandbox's teardown."""
    if group is None:
        return
    with _state:
        if _out.get(group.folders) != group.lease:
            log.warning("sandbox limits: %s released twice, or never taken", group.folders[0])
            return
        del _out[group.folders]
    for folder in group.folders:
        _kill(folder)
    group_pool.later(lambda: recycle(group))


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def retry_released() -> bool:
    """Remove the released groups that were still busy; True while some still are."""
    with _state:
        released = list(_released)
    for folder in released:
        if _kill_and_remove(folder):
            with _state:
                _released.discard(folder)
    with _state:
        return bool(_released)


def sweep() -> None:
    """Remove empty groups left by this process or by a daemon that is gone (SIGKILLed)."""
    _, parents = _detect()
    me = os.getpid()
    retry_released()
    for parent in parents:
        for folder in parent.iterdir():
            owner, namespace = (folder.name.split("-") + ["", ""])[:2]
            if not folder.is_dir() or not owner.isdigit():
                continue
            with _state:
                created = _auto.get(folder)
            if created is not None and time.monotonic() - created > AUTO_GRACE_SECONDS:
                if not _members(folder):
                    with contextlib.suppress(OSError), _state:  # joined meanwhile
                        folder.rmdir()
                        del _auto[folder]
            elif namespace == str(_pid_namespace()) and int(owner) != me and not _alive(int(owner)):
                # Its daemon died (SIGKILL) while a sandbox was starting: what bwrap left
                # there, before its --die-with-parent held, ends now.
                _kill_and_remove(folder)


def _uid_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def wrapper(limits: Limits, group: Group | None) -> list[str]:
    """What goes in front of bwrap: oom score, rlimits, the cgroup joined (`WRAPPER`)."""
    fsize_blocks = limits.workspace_max_mb * MB // 512
    # RLIMIT_NPROC counts every process of the user: the limit is on top of those running now.
    # It does not bind uid 0, nor is it needed with a pids cgroup.
    nproc = 0 if group is not None or os.geteuid() == 0 else _uid_processes() + limits.max_processes
    joins = group.procs() if group is not None else []
    head = ["/bin/sh", "-c", WRAPPER, "atlas-limits"]
    return [*head, str(COMMAND_OOM_SCORE), str(fsize_blocks), str(nproc), *joins, "--"]


def tmpfs_options(limits: Limits) -> list[str]:
    """bwrap options for the private /tmp and /dev/shm, sized; /dev itself read-only."""
    size = str(limits.tmp_max_mb * MB)
    return [
        *("--size", size, "--tmpfs", "/tmp"),
        *("--size", size, "--tmpfs", "/dev/shm"),
        *("--remount-ro", "/dev"),
    ]


def unsandboxed_prefix() -> list[str]:
    """In front of a command run outside the sandbox: it must not inherit the daemon's shield."""
    return ["/bin/sh", "-c", 'echo 1000 > /proc/self/oom_score_adj; exec "$@"', "atlas-oom"]


def shield_daemon() -> bool:
    """Lower this process's oom_score_adj (the daemon, and the workers it forks later), so a
    contained command is killed first. False where this process may not lower it."""
    try:
        Path("/proc/self/oom_score_adj").write_text(str(DAEMON_OOM_SCORE))
    except OSError as exc:
        log.info("sandbox limits: the daemon's oom_score_adj stays as it was (%s)", exc)
        return False
    return True


def _after_fork_in_child() -> None:
    """A child forked while the cgroup worker held the lock would wait on it for ever; the
    groups its parent made or released stay the parent's."""
    global _state
    _state = threading.Lock()
    _auto.clear()
    _released.clear()
    _out.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
group_pool.housekeeping.retry = retry_released  # the cgroup worker's own upkeep
group_pool.housekeeping.sweep = sweep


__all__ = [
    "Group",
    "Limits",
    "create_group",
    "describe",
    "limits_of",
    "make_group",
    "mechanism",
    "release",
    "shield_daemon",
    "sweep",
    "tmpfs_options",
    "unsandboxed_prefix",
    "wrapper",
]
