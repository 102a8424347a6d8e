"""One view of the machine per bot: what it sees and what it may write, for every surface.

`View.of(home, bot)` is the single answer. Commands, MCP servers, the browser and executors get
it as a bubblewrap policy (`View.policy`, through `policy_for`); the file tools resolve every
path through it (`View.resolve`) and open only what it shows (`View.sees`). In it:

- the workspace is writable (not in read-only mode), and so are the granted writable paths;
- the person's home is an empty folder, except the granted paths, the workspace and the
  programs Atlas runs from (its Python, its checkout, the folders on the PATH: read-only);
- hidden everywhere, even inside a grant: `[sandbox] hidden`, the person's known secret folders
  (a second layer behind the empty home), the system's sockets and root-only secrets;
- `/proc` has none of the daemon's processes (the file tools see only a few system-wide
  files there; commands get a /proc of their own);
- the Atlas home and the vault are hidden from commands; the file tools reach them through
  their own fences (atlas/tools/fences.py: areas, asked, never the vault).

What the view hides does not exist for a file tool: the same answer as a missing file.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import ToolError
from atlas.sandbox.launcher import SandboxPolicy

if TYPE_CHECKING:
    from atlas.home import Bot, Home

log = logging.getLogger(__name__)

# The person's known secrets, relative to their home. The home is empty in the view anyway;
# this list hides them again inside a folder the person grants (`readable = ["~"]`).
CREDENTIALS = (
    ".ssh", ".aws", ".gnupg", ".config/gcloud", ".netrc", ".docker", ".kube",
    ".git-credentials", ".config/gh", ".pypirc", ".npmrc", ".password-store",
    ".local/share/keyrings",
    # Tokens of other tools and clouds.
    ".azure", ".oci", ".config/doctl", ".terraform.d", ".vault-token", ".config/hub",
    ".config/op", ".config/git/credentials", ".cargo/credentials", ".cargo/credentials.toml",
    ".gem/credentials", ".m2/settings.xml", ".m2/settings-security.xml",
    ".gradle/gradle.properties", ".pgpass", ".my.cnf", ".s3cfg", ".boto", ".config/rclone",
    ".mc", ".kaggle", ".huggingface", ".cache/huggingface/token", ".config/configstore",
    ".wrangler", ".fly", ".config/sops", ".config/age", ".config/filezilla",
    ".composer/auth.json", ".config/composer/auth.json", ".codex", ".claude", ".claude.json",
    ".gemini", ".config/github-copilot", ".config/solana",
    # Shell start-up files and universal variables: where people keep tokens.
    ".profile", ".bash_profile", ".bashrc", ".zshrc", ".zshenv", ".zprofile", ".env",
    ".config/fish/fish_variables",
    # What the person typed: shells, REPLs and databases keep it (passwords pasted included).
    ".bash_history", ".zsh_history", ".history", ".python_history", ".psql_history",
    ".mysql_history", ".sqlite_history", ".node_repl_history", ".rediscli_history",
    ".lesshst", ".viminfo", ".local/share/fish/fish_history",
    # Browser, mail and messenger profiles: cookies are logged-in sessions; saved passwords.
    ".mozilla", ".thunderbird", ".config/chromium", ".config/google-chrome",
    ".config/google-chrome-beta", ".config/BraveSoftware", ".config/microsoft-edge",
    ".config/vivaldi", ".config/opera", "snap/firefox", "snap/chromium", ".var/app", ".pki",
    ".config/Slack", ".config/discord", ".config/Signal", ".local/share/TelegramDesktop",
    ".config/evolution", ".local/share/evolution",
    ".cache/google-chrome", ".cache/chromium", ".cache/mozilla", ".cache/BraveSoftware",
    # Wallets and other keyrings.
    ".bitcoin", ".electrum", ".ethereum", ".local/share/kwalletd",
    # Sockets of container VMs (their Docker socket is root on the machine; the network namespace
    # does not fence Unix sockets) and local clusters' keys.
    ".colima", ".lima", ".rd", ".local/share/containers/podman/machine", ".minikube",
)  # fmt: skip
# Readable only by root, so hidden only where this process can read them (as root): the
# password hashes, TLS private keys, saved Wi-Fi passwords and the machine's own SSH keys.
ROOT_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssl/private",
    "/etc/letsencrypt/archive", "/etc/letsencrypt/keys", "/etc/NetworkManager/system-connections",
    "/var/lib/iwd",
)  # fmt: skip
ROOT_SECRET_GLOBS = ("/etc/ssh/ssh_host_*key",)
# Unix sockets are not fenced by the network namespace: the Docker socket, the D-Bus buses and
# the per-user agents (ssh, gpg) live under /run. A command has no business there.
# Where /var/run is not a link to /run it holds them too; LXD and Incus keep theirs in /var.
SYSTEM_HIDDEN = tuple(
    Path(name)
    for name in ("/run", "/var/run", "/var/snap/lxd/common/lxd", "/var/lib/lxd", "/var/lib/incus")
)
PROC = Path("/proc")
# What a file tool may read in /proc: system-wide figures. No process folder (the daemon's
# environment, memory, open files), no kernel memory or keys.
PROC_READABLE = frozenset(
    {"cpuinfo", "meminfo", "version", "uptime", "loadavg", "stat", "filesystems", "partitions",
     "swaps", "diskstats", "vmstat"}
)  # fmt: skip
MAX_LINKS = 40  # symbolic links followed in one path, as the kernel's ELOOP
VIEW_TTL_S = 1.0  # a view is built at most once a second per bot (bot.toml edits show within it)
LINK_SCAN_TTL_S = 2.0
LINK_SCAN_MAX_ENTRIES = 200_000


def person_home(environ: Mapping[str, str] | None = None) -> Path:
    """The person's home folder: $HOME (tests point it at a temporary folder)."""
    value = (os.environ if environ is None else environ).get("HOME")
    return Path(value) if value else Path.home()


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def expand(raw: str, base: Path, person: Path) -> Path:
    """A configured path: `~` is the person's home, a relative path is taken from `base`."""
    if raw == "~" or raw.startswith("~/"):
        return person / raw[2:]
    path = Path(raw)
    return path if path.is_absolute() else base / path


def vault_path(home: Home) -> Path:
    """`[trust] vault`, default `<home>/vault`, resolved."""
    vault = home.settings.trust.vault
    return Path(os.path.realpath(Path(vault).expanduser())) if vault else home.root / "vault"


def root_secrets() -> list[Path]:
    """The root-only secret files this process can read (none unless it runs as root)."""
    found = [Path(name) for name in ROOT_SECRETS]
    for pattern in ROOT_SECRET_GLOBS:
        found += Path("/").glob(pattern.lstrip("/"))
    return [path for path in found if os.access(path, os.R_OK)]


@dataclass(frozen=True)
class _Grant:
    raw: str
    written: Path  # as written, normalised
    real: Path  # where it leads


def grants(
    raws: Iterable[tuple[str, Path]],
    kind: str,
    *,
    fenced: tuple[Path, ...],
    workspace: Path,
    around: tuple[Path, ...] = (),
    person: Path,
    owner: str,
) -> tuple[Path, ...]:
    """Granted paths (each raw with the folder a relative one is taken from), less any inside
    the Atlas home or the vault (`fenced`: granting them would undo the sandbox), and less any
    inside the workspace, `around` or another grant: visible already, and a link the bot made
    there would choose where the grant leads (`out -> ~/.config/autostart`)."""
    candidates = []
    for raw, base in raws:
        written = Path(os.path.normpath(expand(raw, base, person)))
        real = written.resolve()
        # A readable folder around the Atlas home is fine: the home stays hidden inside it.
        around_ok = kind == "readable"
        inside = [f for f in fenced if under(real, f) or (real in f.parents and not around_ok)]
        if inside and not under(real, workspace):
            log.warning(
                "sandbox: %s %s of %s is not granted: it holds Atlas's files", kind, raw, owner
            )
            continue
        candidates.append(_Grant(raw, written, real))
    granted: list[Path] = []
    for grant in candidates:
        others = {p for c in candidates if c is not grant for p in (c.written, c.real)}
        folders = ({workspace, *around} | others) - {grant.written, grant.real}
        if any(under(grant.written, f) or under(grant.real, f) for f in folders):
            if not any(under(grant.real, f) for f in folders):
                log.warning(
                    "sandbox: %s %s of %s is not granted: a link inside a visible folder leads "
                    "to %s",
                    kind,
                    grant.raw,
                    owner,
                    grant.real,
                )
            continue  # visible already through the folder around it
        if grant.real not in granted:
            granted.append(grant.real)
    return tuple(granted)


def runtime_places(env_path: str | None = None) -> list[Path]:
    """Where the programs Atlas runs live: its Python (the venv and the interpreter it was made
    from), its checkout, and the folders on the PATH, each resolved."""
    import atlas

    places = [Path(sys.prefix), Path(sys.base_prefix), Path(atlas.__file__).parent.parent]
    path = os.environ.get("PATH", "") if env_path is None else env_path
    places += [Path(entry) for entry in path.split(os.pathsep) if entry]
    return [_real(p) for p in places if p.is_absolute()]


def _folded(paths: Iterable[Path]) -> frozenset[str]:
    return frozenset(str(p).casefold().rstrip("/") or "/" for p in paths)


def _folded_under(text: str, folders: frozenset[str]) -> bool:
    """Whether the (case-folded, absolute) `text` is one of `folders` or lies inside one. Each
    of its prefixes is looked up in the set, "/a", "/a/b", ... up to itself: a handful of set
    lookups instead of comparing with every hidden path (over a hundred) for every name."""
    if not folders:
        return False
    if "/" in folders:
        return True
    end = text.find("/", 1)
    while end != -1:
        if text[:end] in folders:
            return True
        end = text.find("/", end + 1)
    return text in folders


@dataclass(frozen=True)
class View:
    """What one bot sees and may write; paths are resolved (real)."""

    workspace: Path
    person: Path  # the person's home: empty in the view unless `person_granted`
    atlas_home: Path  # commands: hidden; file tools: their fences' areas
    vault: Path
    writable: tuple[Path, ...] = ()  # granted besides the workspace
    readable: tuple[Path, ...] = ()  # granted read-only
    runtime: tuple[Path, ...] = ()  # Atlas's programs under the person's home: read-only
    hidden: tuple[Path, ...] = ()  # never seen, even inside a grant
    read_only: bool = False
    person_granted: bool = False  # a grant covers the whole home: it is not emptied
    _hidden_folded: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def of(cls, home: Home, bot: Bot, *, read_only: bool = False) -> View:
        """The view of this bot (built at most once a second: a file call asks for it)."""
        sandbox = home.settings.sandbox
        mine = bot.settings.sandbox
        key = (
            home.root, bot.name, bot.workspace, str(person_home()), os.environ.get("PATH", ""),
            str(home.settings.trust.vault), tuple(sandbox.hidden), tuple(sandbox.writable),
            tuple(sandbox.readable), tuple(mine.hidden), tuple(mine.writable), tuple(mine.readable),
        )  # fmt: skip
        second = int(time.monotonic() / VIEW_TTL_S)
        cached = _views.get(key)
        if cached is None or cached[0] != second:
            if len(_views) > 64:
                _views.clear()
            cached = _views[key] = (second, build_view(home, bot))
        view = cached[1]
        return view if view.read_only == read_only else replace(view, read_only=read_only)

    # ---- what the file tools see ------------------------------------------------------------

    def sees(self, path: Path) -> bool:
        """Whether a resolved absolute path exists in the view (folders on the way to a visible
        path included). The Atlas home and the vault are left to the file tools' fences.
        Compared as strings: it runs for every name of every path a file tool is given."""
        text = str(path)
        if _folded_under(text.casefold(), self._hidden_folded):
            return False
        if text == "/proc" or text.startswith("/proc/"):
            return text == "/proc" or (text.count("/") == 2 and path.name in PROC_READABLE)
        if self.person_granted or not text.startswith(self._person_text):
            return True
        return any(
            text == b or text.startswith(b + "/") or b.startswith(text + "/")
            for b in self._bound_text
        )

    @functools.cached_property
    def _person_text(self) -> str:
        return str(self.person) + "/"

    @functools.cached_property
    def _bound_text(self) -> tuple[str, ...]:
        return tuple(map(str, self._bound()))

    def may_write(self, path: Path) -> bool:
        """Whether the view makes this resolved path writable (the workspace, a writable grant)."""
        if self.read_only or not self.sees(path):
            return False
        return any(under(path, folder) for folder in (self.workspace, *self.writable))

    def resolve(self, path: Path) -> Path:
        """The absolute path resolved as the kernel would (symlinks, `..`), one name at a time:
        a name the view hides is not looked at, nor anything after it, so no link inside a
        hidden folder is followed and no answer depends on what is there."""
        if not path.is_absolute():
            raise ToolError(f"{path}: not an absolute path")
        pending = list(reversed(path.parts[1:]))
        current = Path("/")
        links = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                current = current.parent
                continue
            candidate = current / name
            rest = list(reversed(pending))
            if not self.sees(candidate):
                return Path(os.path.normpath(candidate.joinpath(*rest)))
            try:
                st = os.lstat(candidate)
            except OSError:  # missing (or unreadable): the rest is taken as written
                return Path(os.path.normpath(candidate.joinpath(*rest)))
            if not stat.S_ISLNK(st.st_mode):
                current = candidate
                continue
            links += 1
            if links > MAX_LINKS:
                raise ToolError(f"{path}: too many levels of symbolic links")
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
        return current

    def _bound(self) -> tuple[Path, ...]:
        return (self.workspace, *self.writable, *self.readable, *self.runtime, self.atlas_home,
                self.vault)  # fmt: skip

    # ---- what commands see --------------------------------------------------------------------

    def command_hidden(self) -> tuple[Path, ...]:
        """What a sandbox replaces by an empty folder (or file): the Atlas home, the vault, the
        person's home (its grants and Atlas's programs bound back), and every hidden path."""
        person = () if self.person_granted else (self.person,)
        return (self.atlas_home, self.vault, *person, *self.hidden)

    def command_readable(self) -> tuple[Path, ...]:
        """Bound back read-only: grants, and Atlas's programs where the home would hide them."""
        return (*self.readable, *self.runtime)

    def policy(self, *, env: Mapping[str, str], proxy_socket: Path | None = None) -> SandboxPolicy:
        """This view as bubblewrap's policy (atlas/sandbox/launcher.py)."""
        return SandboxPolicy(
            workspace=self.workspace,
            writable=self.writable,
            hidden=self.command_hidden(),
            read_only=self.read_only,
            env=env,
            proxy_socket=proxy_socket,
            readable=self.command_readable(),
        )

    def described(self) -> str:
        """For `atlas doctor`: what this bot may write, read, and never sees (one line)."""
        writable = [] if self.read_only else [self.workspace, *self.writable]
        home = "granted" if self.person_granted else "empty but for grants"
        programs = f"; Atlas's programs ({len(self.runtime)} folders)" if self.runtime else ""
        present = [str(p) for p in self.hidden if p.exists()]
        more = ", ".join(present[:4]) + ("..." if len(present) > 4 else "")
        readable = "".join(f", {p}" for p in self.readable)
        return (
            f"writable: {', '.join(map(str, writable)) or 'nothing'}; "
            f"readable: / less what is hidden{readable}{programs}; "
            f"hidden: the Atlas home, the vault, your home {self.person} ({home}), "
            f"/proc of other processes, {len(present)} more paths ({more})"
        )

    # ---- what find_files skips, and hard links -------------------------------------------------

    def hidden_below(self, root: Path) -> list[Path]:
        """Hidden folders and files below a search's root, for ripgrep to skip (each result is
        checked with `sees` anyway): the emptied home's entries, and every hidden path."""
        found = [p for p in self.hidden if root in p.parents]
        if under(root, PROC) or PROC in root.parents or root in PROC.parents:
            found.append(PROC)
        if not self.person_granted and (root == self.person or root in self.person.parents):
            try:
                entries = list(self.person.iterdir())
            except OSError:
                entries = []
            found += [entry for entry in entries if not self.sees(entry)]
        return found

    def hard_link_hidden(self, st: os.stat_result, path: Path) -> bool:
        """Whether a file with several links may be a hidden file under another name. The
        hidden trees are walked for their inodes (kept a few seconds); where they are too big
        to walk, a file outside the workspace and the grants is taken as one (nobody in the
        view can make such a link there: the sandbox's mounts refuse it)."""
        if st.st_nlink <= 1 or not stat.S_ISREG(st.st_mode):
            return False
        inodes = _hidden_inodes(self)
        if inodes is None:
            return not any(under(path, f) for f in (self.workspace, *self.writable))
        return (st.st_dev, st.st_ino) in inodes


_views: dict[tuple[object, ...], tuple[int, View]] = {}


def build_view(
    home: Home, bot: Bot | None, *, read_only: bool = False, workspace: Path | None = None
) -> View:
    """The view from the settings: config.toml's [sandbox] (the home's) and bot.toml's.
    `workspace` stands for the bot's (an executor's task folder); without a bot (an executor
    started for the person), the home's grants alone."""
    from atlas.config import BotSandboxSettings

    person = _real(person_home())
    atlas_home, vault = _real(home.root), _real(vault_path(home))
    workspace = _real(workspace if workspace is not None else bot.workspace)  # type: ignore[union-attr]
    sandbox = home.settings.sandbox
    mine = bot.settings.sandbox if bot is not None else BotSandboxSettings()
    owner = f"bot {bot.name}" if bot is not None else "the home's executors"
    base = _real(bot.workspace) if bot is not None else workspace  # the bot's relative grants
    common = {"fenced": (atlas_home, vault), "workspace": workspace, "person": person,
              "owner": owner}  # fmt: skip
    writable = grants(
        [
            *((raw, person) for raw in sandbox.writable),
            *((raw, base) for raw in mine.writable),
        ],
        "writable",
        **common,  # type: ignore[arg-type]
    )
    readable = grants(
        [
            *((raw, person) for raw in sandbox.readable),
            *((raw, base) for raw in mine.readable),
        ],
        "readable",
        around=writable,
        **common,  # type: ignore[arg-type]
    )
    person_granted = any(under(person, g) for g in (*writable, *readable))
    runtime = tuple(
        place
        for place in _outermost(runtime_places())
        if person in place.parents
        and not any(under(place, f) for f in (atlas_home, vault))
        and place.is_dir()
    )
    hidden = [person / name for name in CREDENTIALS]
    hidden += [*SYSTEM_HIDDEN, *root_secrets()]
    hidden += [expand(raw, person, person) for raw in (*sandbox.hidden, *mine.hidden)]
    hidden = [p if p.is_absolute() else person / p for p in hidden]
    # A hidden path given through a link is hidden where it leads too.
    hidden = list(dict.fromkeys([*hidden, *(_real(p) for p in hidden)]))
    return View(
        workspace=workspace,
        person=person,
        atlas_home=atlas_home,
        vault=vault,
        writable=writable,
        readable=readable,
        runtime=runtime,
        hidden=tuple(hidden),
        read_only=read_only,
        person_granted=person_granted,
        _hidden_folded=_folded(hidden),
    )


_link_scans: dict[View, tuple[float, frozenset[tuple[int, int]] | None]] = {}


def inodes_under(
    roots: Iterable[Path | str], skip: Callable[[str], bool]
) -> frozenset[tuple[int, int]] | None:
    """(device, inode) of every regular file under `roots` (a root may be a file itself), not
    going into the folders `skip` names; None past LINK_SCAN_MAX_ENTRIES entries. Every file
    counts, whatever its links now: a link may be made after the walk."""
    found: set[tuple[int, int]] = set()
    seen = 0
    stack = [str(root) for root in roots]
    while stack:
        top = stack.pop()
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
            continue
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > LINK_SCAN_MAX_ENTRIES:
                return None
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(est.st_mode) and not skip(entry.path):
                stack.append(entry.path)
            elif stat.S_ISREG(est.st_mode):
                found.add((est.st_dev, est.st_ino))
    return frozenset(found)


def _hidden_inodes(view: View) -> frozenset[tuple[int, int]] | None:
    """(device, inode) of every file the view hides (the emptied home and the hidden paths);
    None when there are more than LINK_SCAN_MAX_ENTRIES entries to walk."""
    now = time.monotonic()
    cached = _link_scans.get(view)
    if cached and now - cached[0] < LINK_SCAN_TTL_S:
        return cached[1]
    skip = {str(p) for p in (view.workspace, *view.writable, *view.readable, *view.runtime,
                             view.atlas_home, view.vault)}  # fmt: skip
    roots = [p for p in view.hidden if p.exists() and not under(p, PROC)]
    if not view.person_granted:
        roots.append(view.person)
    result = inodes_under(roots, lambda folder: folder in skip)
    if result is None:
        _link_scans[view] = (now, None)
        return None
    _link_scans.clear()  # one view's walk kept at a time: they are big
    _link_scans[view] = (now, result)
    return result


def doctor_lines(home: Home) -> list[tuple[str, bool, str]]:
    """`atlas doctor`: each bot's view, one line each."""
    return [
        (f"view of {bot.name}", True, View.of(home, bot).described()) for bot in home.bots.values()
    ]


def person_readable() -> tuple[Path, ...]:
    """Atlas's own programs under the person's home (its Python, its checkout, the PATH's
    folders): bound back read-only behind the emptied home."""
    person = _real(person_home())
    return tuple(p for p in _outermost(runtime_places()) if person in p.parents and p.is_dir())


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Each path once, less those inside another (one mount covers them)."""
    unique = list(dict.fromkeys(paths))
    return [p for p in unique if not any(o in p.parents for o in unique)]


__all__ = [
    "CREDENTIALS",
    "ROOT_SECRETS",
    "SYSTEM_HIDDEN",
    "View",
    "build_view",
    "grants",
    "person_home",
    "person_readable",
    "vault_path",
]
