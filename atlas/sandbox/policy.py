"""The standard sandbox policy of a bot: what its commands may write, what they never see, and
the environment they get (an allow-list: no secret the config names ever enters)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.sandbox.launcher import SandboxPolicy

if TYPE_CHECKING:
    from atlas.home import Bot, Home

log = logging.getLogger(__name__)

# The person's secrets, relative to their home folder. Only those that exist cost a mount.
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
ALLOWED_NAMES = frozenset({"PATH", "HOME", "LANG", "TERM", "TZ", "USER"})
ALLOWED_PATTERN = re.compile(r"LC_[A-Z_]+")


def sandbox_enabled(home: Home) -> bool:
    """config.toml's [sandbox] enabled (default true)."""
    return home.settings.sandbox.enabled


def _person_home(environ: Mapping[str, str] | None = None) -> Path:
    value = (os.environ if environ is None else environ).get("HOME")
    return Path(value) if value else Path.home()


def allowed_env(home: Home, bot: Bot, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH HOME LANG LC_* TERM TZ USER from Atlas's environment, then [sandbox] env of
    config.toml and of bot.toml; a variable the config names as a secret never passes."""
    from atlas.secrets import secret_env_names

    source = os.environ if environ is None else environ
    env = {
        name: value
        for name, value in source.items()
        if name in ALLOWED_NAMES or ALLOWED_PATTERN.fullmatch(name)
    }
    env |= home.settings.sandbox.env | bot.settings.sandbox.env
    for name in secret_env_names(home) & env.keys():
        del env[name]
    return env


def _expand(raw: str, base: Path, person: Path) -> Path:
    if raw == "~" or raw.startswith("~/"):
        return person / raw[2:]
    path = Path(raw)
    return path if path.is_absolute() else base / path


def _root_secrets() -> list[Path]:
    """The root-only secret files this process can read (none unless it runs as root)."""
    found = [Path(name) for name in ROOT_SECRETS]
    for pattern in ROOT_SECRET_GLOBS:
        found += Path("/").glob(pattern.lstrip("/"))
    return [path for path in found if os.access(path, os.R_OK)]


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _granted(home: Home, bot: Bot, vault: Path, person: Path) -> tuple[Path, ...]:
    """bot.toml's writable paths, less any inside the Atlas home or the vault (those stay
    hidden whatever a bot.toml says: it would undo the sandbox), and less any inside the
    workspace or another granted folder: writable already, and a link the bot made there would
    choose where the grant leads (`out -> ~/.config/autostart`)."""
    root, workspace = home.root.resolve(), bot.workspace.resolve()
    candidates = []
    for raw in bot.settings.sandbox.writable:
        written = Path(os.path.normpath(_expand(raw, workspace, person)))
        path = written.resolve()
        inside = [f for f in (root, vault) if _under(path, f) or path in f.parents]
        if inside and not _under(path, workspace):
            log.warning(
                "sandbox: %s of bot %s is not granted: it holds Atlas's files", raw, bot.name
            )
            continue
        candidates.append((raw, written, path))
    granted: list[Path] = []
    for raw, written, path in candidates:
        around = {workspace} | {p for _, w, r in candidates for p in (w, r)} - {written, path}
        if any(_under(written, folder) or _under(path, folder) for folder in around):
            if not any(_under(path, folder) for folder in around):
                log.warning(
                    "sandbox: %s of bot %s is not granted: a link inside a writable folder "
                    "leads to %s",
                    raw,
                    bot.name,
                    path,
                )
            continue  # writable already through the folder around it
        if path not in granted:
            granted.append(path)
    return tuple(granted)


def standard_hidden(home: Home) -> list[Path]:
    """What no sandbox of this home sees: the home, the vault, the person's credentials, the
    system's sockets and root-only secrets, and config.toml's [sandbox] hidden."""
    from atlas.tools.fences import vault_of

    person = _person_home()
    hidden = [home.root.resolve(), vault_of(home), *(person / name for name in CREDENTIALS)]
    hidden += [*SYSTEM_HIDDEN, *_root_secrets()]
    hidden += [_expand(raw, person, person) for raw in home.settings.sandbox.hidden]
    return hidden


def person_readable() -> tuple[Path, ...]:
    """The person's home when it lives under /tmp (tests, throwaway accounts): visible, read-only,
    although the sandbox's /tmp is private."""
    tmp = Path(os.path.realpath("/tmp"))
    real_person = Path(os.path.realpath(_person_home()))
    return (real_person,) if tmp in real_person.parents else ()


def policy_for(
    home: Home, bot: Bot, *, read_only: bool = False, proxy_socket: Path | None = None
) -> SandboxPolicy:
    """The workspace, [sandbox] writable/hidden/env, the home and the credentials hidden."""
    from atlas.sandbox.limits import limits_of
    from atlas.tools.fences import vault_of

    person = _person_home()
    hidden = standard_hidden(home)
    hidden += [_expand(raw, person, person) for raw in bot.settings.sandbox.hidden]
    return SandboxPolicy(
        workspace=bot.workspace,
        writable=_granted(home, bot, vault_of(home), person),
        hidden=tuple(hidden),
        read_only=read_only,
        env=allowed_env(home, bot),
        proxy_socket=proxy_socket,
        readable=person_readable(),
        limits=limits_of(home.settings.sandbox),
    )
