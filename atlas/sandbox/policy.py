"""A bot's sandbox policy, derived from its one view (atlas/sandbox/view.py), and the
environment its commands get (an allow-list: no secret the config names ever enters)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.sandbox.launcher import SandboxPolicy
from atlas.sandbox.view import (
    CREDENTIALS,
    ROOT_SECRETS,
    SYSTEM_HIDDEN,
    expand,
    person_home,
    person_readable,
    root_secrets,
    vault_path,
)

if TYPE_CHECKING:
    from atlas.home import Bot, Home

ALLOWED_NAMES = frozenset({"PATH", "HOME", "LANG", "TERM", "TZ", "USER"})
ALLOWED_PATTERN = re.compile(r"LC_[A-Z_]+")


def sandbox_enabled(home: Home) -> bool:
    """config.toml's [sandbox] enabled (default true)."""
    return home.settings.sandbox.enabled


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


def standard_hidden(home: Home) -> list[Path]:
    """What no sandbox of this home sees, whatever its workspace: the Atlas home, the vault,
    the person's home (emptied; `person_readable` is bound back), the hidden paths of
    config.toml and the system's sockets and root-only secrets (atlas/sandbox/view.py)."""
    person = Path(os.path.realpath(person_home()))
    hidden = [Path(os.path.realpath(home.root)), vault_path(home), person]
    hidden += [person / name for name in CREDENTIALS]
    hidden += [*SYSTEM_HIDDEN, *root_secrets()]
    hidden += [expand(raw, person, person) for raw in home.settings.sandbox.hidden]
    return hidden


def policy_for(
    home: Home, bot: Bot, *, read_only: bool = False, proxy_socket: Path | None = None
) -> SandboxPolicy:
    """The bot's view (atlas/sandbox/view.py) as bubblewrap's policy, with its environment."""
    from atlas.sandbox.limits import limits_of
    from atlas.sandbox.view import View

    view = View.of(home, bot, read_only=read_only)
    policy = view.policy(env=allowed_env(home, bot), proxy_socket=proxy_socket)
    return replace(policy, limits=limits_of(home.settings.sandbox))


__all__ = [
    "CREDENTIALS",
    "ROOT_SECRETS",
    "SYSTEM_HIDDEN",
    "allowed_env",
    "person_readable",
    "policy_for",
    "sandbox_enabled",
    "standard_hidden",
]
