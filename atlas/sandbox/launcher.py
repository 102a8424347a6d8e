"""The bubblewrap sandbox every command runs in (docs/sandbox.md).

`sandbox_argv(argv, policy)` puts `bwrap` and its options in front of a command. Inside: the
root filesystem read-only, a minimal /dev, its own /proc and a private /tmp; only the workspace
(unless read-only) and granted paths writable; the Atlas home, the vault and the person's
credential folders replaced by empty ones; its own pid, ipc, uts and network namespaces (no route
out: the network is reached only through Atlas's proxy, bridged in by socat); an environment made
only of what the policy lists. When the command ends, or bwrap's process dies, everything
inside dies with it (INIT; the pid namespace ends with its first process); limits from
atlas/sandbox/limits.py.

What works depends on where Atlas runs (root or not, inside a container or another sandbox), so
the variants are probed once per process, strongest first. Where none starts: SandboxUnavailable
(fail closed).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from atlas.errors import ToolError
from atlas.sandbox import limits as limits_
from atlas.sandbox.limits import Group, Limits

log = logging.getLogger(__name__)

PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
PROXY_SOCKET_INSIDE = "/tmp/.atlas-proxy.sock"  # in the sandbox's private /tmp
PROXY_ENV_NAMES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
)
PROBE_SECONDS = 10.0
MAX_LINKS = 40  # links followed resolving one path, as the kernel's ELOOP
FIX = (
    "install bubblewrap (`apt-get install bubblewrap`) on Linux with user namespaces allowed, "
    "or set `[sandbox] enabled = false` in config.toml (only the person can: commands then run "
    "unsandboxed)"
)


class SandboxUnavailable(ToolError):
    """No sandbox can start here; commands are refused rather than run uncontained."""


@dataclass(frozen=True)
class SandboxPolicy:
    workspace: Path  # writable unless read_only
    writable: tuple[Path, ...] = ()  # extra granted paths (bot.toml [sandbox] writable)
    hidden: tuple[Path, ...] = ()  # replaced by an empty folder (or an empty file)
    read_only: bool = False  # nothing writable, not even the workspace (private /tmp only)
    env: Mapping[str, str] = field(default_factory=dict)  # the complete environment inside
    proxy_socket: Path | None = None  # Unix socket of the egress proxy; None = no network at all
    cwd: Path | None = None
    # Visible read-only although under /tmp (which is private inside): the person's home when it
    # lives there (tests, throwaway accounts), so that what is hidden inside it stays meaningful.
    readable: tuple[Path, ...] = ()
    limits: Limits = Limits()  # processes, memory, /tmp size, CPU (atlas/sandbox/limits.py)


@dataclass(frozen=True)
class Variant:
    """One way of starting bwrap that works on this machine."""

    user_ns: bool  # --unshare-user (not needed as root, refused in some nested setups)
    proc: bool  # a fresh /proc; False: an empty one (a nested userns may not mount proc)
    # --disable-userns: no user namespace inside, so no capabilities regained in one (most of
    # the kernel reached only from a user namespace stays out of reach). Needs user_ns and a
    # bwrap >= 0.8.
    no_nested_userns: bool = False

    def options(self) -> list[str]:
        user = ["--unshare-user"] if self.user_ns else []
        user += ["--disable-userns"] if self.no_nested_userns else []
        proc = ["--proc", "/proc"] if self.proc else ["--tmpfs", "/proc"]
        return [*NAMESPACES, *user, "--ro-bind", "/", "/", "--dev", "/dev", *proc]


NAMESPACES = [
    # As root, bwrap would keep every capability: a command could unmount what hides the home.
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
]
VARIANTS = (Variant(True, True), Variant(False, True), Variant(True, False), Variant(False, False))


def _bwrap() -> str:
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"the sandbox needs Linux (this is {sys.platform}); {FIX}")
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(f"bwrap (bubblewrap) is not installed; {FIX}")
    return found


def _starts(bwrap: str, variant: Variant) -> str | None:
    """None when this variant runs a command; else bwrap's complaint."""
    argv = [bwrap, *variant.options(), "--tmpfs", "/tmp", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@functools.cache
def _bwrap_once() -> str:
    """Where bwrap is, once found: not searched on the PATH per command (not found raises,
    and is not remembered)."""
    return _bwrap()


@functools.cache
def _probe() -> Variant | str:
    try:
        bwrap = _bwrap()
    except SandboxUnavailable as exc:
        return str(exc)
    complaints = []
    for variant in VARIANTS:
        complaint = _starts(bwrap, variant)
        if complaint is None:
            stronger = replace(variant, no_nested_userns=True)
            if variant.user_ns and _starts(bwrap, stronger) is None:
                variant = stronger
            log.info("sandbox: bwrap starts with %s", variant)
            return variant
        complaints.append(complaint)
    return f"bwrap cannot start a sandbox here ({complaints[-1]}); {FIX}"


def probed() -> bool:
    """Whether this process has probed already (then `probe` returns at once)."""
    cache_info = getattr(_probe, "cache_info", None)  # absent when a test stands in for it
    return cache_info is not None and cache_info().currsize > 0


def probe() -> Variant:
    """The strongest variant that starts here (probed once per process); blocks ~10-40 ms."""
    found = _probe()
    if isinstance(found, str):
        raise SandboxUnavailable(found)
    return found


def _under(path: Path, folder: Path) -> bool:
    # As strings: `folder in path.parents` builds a Path per parent, and a bot's policy
    # compares over a hundred hidden paths with each other (docs/benchmarks.md).
    text, top = str(path), str(folder)
    return text == top or text.startswith(top if top.endswith("/") else top + "/")


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


# What one lstat says of a path, for telling later whether it changed: type and permissions,
# device and inode; for a link also its ctime (its target is fixed while its inode is, and the
# ctime guards against an inode number reused). None: nothing there.
Signature = tuple[int, int, int, int] | None


def _signature(path: str) -> Signature:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    ctime = st.st_ctime_ns if stat.S_ISLNK(st.st_mode) else 0
    return (st.st_mode, st.st_dev, st.st_ino, ctime)


class _NotWalked(Exception):
    """A path `_Facts` leaves to os.path.realpath."""


class _Facts:
    """What one policy's mounts ask of the file system, each asked once and recorded: where a
    path leads (os.path.realpath's answer, each folder on the way resolved once for every path
    below it) and what is there. A bot's policy names over a hundred paths, most under the same
    home. `looked` is every path whose lstat the answers rest on: while none of them changes,
    the same policy gives the same mounts (`_mount_options` reuses them). `exact` is False
    where an answer came from elsewhere (a relative path, a loop of links): not to be reused."""

    def __init__(self) -> None:
        self.looked: dict[str, Signature] = {}
        self.exact = True
        self._real: dict[str, str] = {}
        self._links = 0

    def _look(self, path: str) -> Signature:
        if path not in self.looked:
            self.looked[path] = _signature(path)
        return self.looked[path]

    def real(self, path: Path) -> Path:
        text = str(path)
        if not path.is_absolute() or text.startswith("//"):
            self.exact = False
            return _real(path)
        self._links = 0
        try:
            return Path(self._walk(text))
        except _NotWalked:  # a loop of links, or a link gone meanwhile: realpath's own answer
            self.exact = False
            return _real(path)

    def _walk(self, text: str) -> str:
        """realpath of an absolute path, from its parent's (memoised): a link's target is
        walked in turn; `..` goes up from where the parent really is, as realpath does."""
        found = self._real.get(text)
        if found is not None:
            return found
        parent, name = os.path.split(text)
        if parent == text:
            return parent  # the root
        if name in ("", "."):
            found = self._walk(parent)
        elif name == "..":
            found = os.path.dirname(self._walk(parent))
        else:
            base = self._walk(parent)
            candidate = os.path.join(base, name)
            signature = self._look(candidate)
            if signature is None or not stat.S_ISLNK(signature[0]):
                found = candidate  # missing: the rest is taken as written, as realpath does
            else:
                self._links += 1
                if self._links > MAX_LINKS:
                    raise _NotWalked(candidate)
                try:
                    target = os.readlink(candidate)
                except OSError as exc:
                    raise _NotWalked(candidate) from exc
                found = self._walk(os.path.join(base, target))
        self._real[text] = found
        return found

    def _mode(self, path: Path) -> int | None:
        signature = self._look(str(path))
        if signature is not None and stat.S_ISLNK(signature[0]):
            self.exact = False  # left unresolved (a loop): as the kernel sees it now
            try:
                return os.stat(path).st_mode
            except OSError:
                return None
        return None if signature is None else signature[0]

    def exists(self, path: Path) -> bool:
        return self._mode(path) is not None

    def is_dir(self, path: Path) -> bool:
        mode = self._mode(path)
        return mode is not None and stat.S_ISDIR(mode)


def bound_back(policy: SandboxPolicy) -> list[Path]:
    """What a sandbox shows read-only besides the root: the policy's readable paths, and
    Atlas's own programs where they live under the private /tmp (a CI clone there)."""
    return [*policy.readable, *_runtime_under(_real(Path("/tmp")), policy.env)]


def _runtime_under(
    tmp: Path, env: Mapping[str, str], real: Callable[[Path], Path] = _real
) -> list[Path]:
    """Atlas's own Python, its package and the PATH's folders, where they live under /tmp (a
    checkout or a CI clone there): the private /tmp would hide the programs a sandbox runs."""
    import atlas

    places = [Path(sys.prefix), Path(sys.base_prefix), Path(atlas.__file__).parent.parent]
    places += [Path(entry) for entry in env.get("PATH", "").split(os.pathsep) if entry]
    # Never /tmp itself: the machine's /tmp holds the person's tmux and ssh-agent sockets.
    return [
        place
        for place in places
        if place.is_absolute() and _under(real(place), tmp) and real(place) != tmp
    ]


def _pins(bound: list[tuple[Path, list[str]]], hidden: list[Path]) -> list[tuple[Path, list[str]]]:
    """Each folder between a writable mount and a path hidden inside it, bound onto itself as it
    was: a mount point cannot be renamed, so no command can move what is hidden out from under
    its hiding place (`mv ~/.local/share x`), for the next command to find it unhidden."""
    pins: dict[Path, list[str]] = {}
    for top, options in bound:
        if options[0] != "--bind":
            continue  # read-only: nothing in it can be moved
        for path in hidden:
            for folder in path.parents:
                if folder == top or top not in folder.parents:
                    break
                pins.setdefault(folder, ["--bind", str(folder), str(folder)])
    return list(pins.items())


def _mounts(
    policy: SandboxPolicy, facts: _Facts | None = None
) -> tuple[list[tuple[Path, list[str]]], list[Path]]:
    """Every mount after the root's, with the path it lands on; and the hidden folders to make
    read-only once everything below them is mounted. `facts` records what they rest on."""
    facts = facts if facts is not None else _Facts()
    real = facts.real
    tmp = real(Path("/tmp"))
    bound: list[tuple[Path, list[str]]] = []
    workspace = real(policy.workspace)
    mode = "--ro-bind" if policy.read_only else "--bind"
    bound.append((workspace, [mode, str(workspace), str(workspace)]))
    for path in map(real, policy.writable):
        if facts.exists(path):
            bound.append((path, [mode, str(path), str(path)]))
    for path in map(real, (*policy.readable, *_runtime_under(tmp, policy.env, real))):
        if facts.is_dir(path):
            bound.append((path, ["--ro-bind", str(path), str(path)]))
    visible = [p for p, _ in bound]
    mounts = list(bound)
    hidden_dirs = []
    hidden = list(dict.fromkeys(map(real, policy.hidden)))  # once each (/var/run is /run)
    # An emptied folder (the private /tmp, the person's home) hides what lies inside it: what
    # is hidden there costs no mount, unless a visible path brings it back into sight.
    covers = [tmp, *(path for path in hidden if facts.is_dir(path))]
    for path in hidden:
        covered = any(path != c and _under(path, c) for c in covers)
        on_the_way = facts.is_dir(path) and any(v != path and _under(v, path) for v in visible)
        if not facts.exists(path) or (
            covered and not on_the_way and not any(_under(path, v) for v in visible)
        ):
            continue  # nothing there, or already out of sight
        if facts.is_dir(path):
            mounts.append((path, ["--tmpfs", str(path)]))
            hidden_dirs.append(path)
        else:
            mounts.append((path, ["--ro-bind", "/dev/null", str(path)]))
    mounts += _pins(bound, [path for path, options in mounts[len(bound) :]])
    # A folder is mounted before what lies inside it: the home is hidden, then its workspace
    # bound back; a granted folder is bound, then the credentials inside it hidden again.
    mounts.sort(key=lambda item: len(item[0].parts))
    return mounts, hidden_dirs


@dataclass(frozen=True)
class _BuiltMounts:
    options: tuple[str, ...]  # bwrap's mount options, --remount-ro of the hidden folders last
    watched: tuple[str, ...]  # every path whose lstat they rest on
    signatures: tuple[Signature, ...]  # what those lstats said

    def current(self) -> bool:
        return tuple(map(_signature, self.watched)) == self.signatures


MOUNT_CACHE_SIZE = 32  # policies kept: a few per bot (read-only mode, executors' folders)
_built_mounts: dict[tuple[object, ...], _BuiltMounts] = {}


def _mount_options(policy: SandboxPolicy) -> tuple[str, ...]:
    """bwrap's mount options for this policy, as strings. Working them out walks over a hundred
    paths (~2-3 ms for a bot's policy); the next command of the same policy reuses them after
    one lstat of each path they rest on (~0.2 ms) finds none changed: a secret folder made
    since, a link turned elsewhere, a hidden file replaced all make them worked out anew."""
    key = (
        policy.workspace, policy.writable, policy.hidden, policy.readable, policy.read_only,
        policy.env.get("PATH", ""),
    )  # fmt: skip
    built = _built_mounts.get(key)
    if built is not None and built.current():
        return built.options
    facts = _Facts()
    mounts, hidden_dirs = _mounts(policy, facts)
    options = [option for _, mount in mounts for option in mount]
    for path in hidden_dirs:
        options += ["--remount-ro", str(path)]
    built = _BuiltMounts(tuple(options), tuple(facts.looked), tuple(facts.looked.values()))
    if facts.exact:
        if len(_built_mounts) >= MOUNT_CACHE_SIZE:
            _built_mounts.clear()
        _built_mounts[key] = built
    return built.options


def _proxy_options(policy: SandboxPolicy) -> list[str]:
    if policy.proxy_socket is None:
        return []
    options = ["--bind", str(policy.proxy_socket), PROXY_SOCKET_INSIDE]
    for name in PROXY_ENV_NAMES:
        options += ["--setenv", name, PROXY_URL]
    return [
        *options,
        "--setenv",
        "NO_PROXY",
        "localhost,127.0.0.1",
        "--setenv",
        "no_proxy",
        "localhost,127.0.0.1",
    ]


OWN_PID_NAMESPACE_MAX_PID = 9  # inside bwrap the init script is pid 2 (bwrap's own init is 1)

# The sandbox's first process (bwrap's pid 1 aside), in front of the command. $1 = 1: socat
# forwards 127.0.0.1:3128 to the proxy's socket; the command starts only once socat says it
# listens (its notice, read from a pipe: no polling, no race); the rest of socat's notices are
# drained in the background so it never blocks on a full pipe. If socat cannot start, the pipe
# closes and the command runs without network. $2 = 1: stdin is the lifeline, a pipe whose only
# writer is Atlas: when it closes (the job is killed, or Atlas died, even by SIGKILL, even before
# bwrap's --die-with-parent took hold) everything in the sandbox is killed. When the command
# ends, so does everything else in the sandbox: bwrap's pid 1 waits for all its children, so a
# bridge or a leftover `server &` would otherwise keep the sandbox alive forever (issue 38).
# `kill -1` signals every process the user may signal, so it is only ever run as one of the
# first processes of a pid namespace of our own (bwrap's --unshare-pid: this script is pid 2):
# started by hand outside one, as root, it would kill the whole machine (it did, once).
INIT = f"""
if (( $$ > {OWN_PID_NAMESPACE_MAX_PID} )); then
  echo "atlas sandbox init: pid $$ is not in a pid namespace of its own; refusing to run" >&2
  exit 125
fi
if [[ $2 == 1 ]]; then
  exec 4<&0
  {{ while read -r _; do :; done; kill -KILL -1; }} <&4 4<&- &
  disown
  exec 4<&- </dev/null
fi
if [[ $1 == 1 ]]; then
  exec 3< <(exec socat -d -d TCP-LISTEN:{PROXY_PORT},bind=127.0.0.1,fork,reuseaddr \\
    UNIX-CONNECT:{PROXY_SOCKET_INSIDE} 2>&1)
  while IFS= read -r -t 10 line <&3; do [[ $line == *" listening on "* ]] && break; done
  cat <&3 >/dev/null 3<&- &
  disown
  exec 3<&-
fi
"${{@:3}}"
status=$?
kill -KILL -1 2>/dev/null
exit $status
"""
BRIDGE = INIT  # its former name
# The same for a command with no network (no proxy socket): nothing to bridge, so no bash and
# no bridge branch to parse: `/bin/sh` (dash where there is one) starts ~1 ms sooner. The same
# arguments ($1 is always 0), the same lifeline and the same end.
OFFLINE_INIT = f"""
if [ $$ -gt {OWN_PID_NAMESPACE_MAX_PID} ]; then
  echo "atlas sandbox init: pid $$ is not in a pid namespace of its own; refusing to run" >&2
  exit 125
fi
if [ "$2" = 1 ]; then
  exec 4<&0
  {{ while read -r _; do :; done; kill -9 -1; }} <&4 4<&- &
  exec 4<&- </dev/null
fi
shift 2
"$@"
status=$?
kill -9 -1 2>/dev/null
exit $status
"""

AUTO_GROUP = "auto"


def sandbox_argv(
    argv: Sequence[str],
    policy: SandboxPolicy,
    *,
    lifeline: bool = False,
    group: Group | None | str = AUTO_GROUP,
) -> list[str]:
    """The limits' wrapper, bwrap and its options, then `argv`. Raises SandboxUnavailable where
    none can start. `lifeline`: the caller gives a pipe as stdin and closes its end to end the
    sandbox. `group`: the cgroup to join (the caller releases it, limits.release); by default
    a new one, removed by a later sweep once empty."""
    variant = probe()
    if group == AUTO_GROUP:
        group = limits_.create_group(policy.limits, released_by_caller=False)
    assert not isinstance(group, str)
    command = [*limits_.wrapper(policy.limits, group), _bwrap_once(), *variant.options()]
    command += limits_.tmpfs_options(policy.limits)
    command += _mount_options(policy)
    command.append("--clearenv")  # before every --setenv: it clears what came earlier too
    for name, value in policy.env.items():
        command += ["--setenv", name, value]
    command += _proxy_options(policy)
    command += ["--chdir", str(_real(policy.cwd or policy.workspace))]
    flags = ["1" if policy.proxy_socket is not None else "0", "1" if lifeline else "0"]
    init = (
        ["bash", "-c", INIT] if policy.proxy_socket is not None else ["/bin/sh", "-c", OFFLINE_INIT]
    )
    argv = [*init, "atlas-sandbox", *flags, *argv]
    return [*command, "--", *argv]


__all__ = [
    "PROXY_URL",
    "SandboxPolicy",
    "SandboxUnavailable",
    "Variant",
    "probe",
    "probed",
    "sandbox_argv",
]
