"""What Atlas knows of the usual MCP launchers (`npx`, `uvx`, `uv tool run`, `pipx run`): the
registry each installs from, where it keeps what it installed (the server's own data folder, so a
second start needs no network), and what to install when it is missing. Also the checks made
before a sandboxed server starts: a missing program, a program or script the sandbox does not
show (its `/tmp` is private; the Atlas home is hidden).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from atlas.errors import AtlasError

PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")
NPM_HOST = "registry.npmjs.org"


class ProgramMissing(AtlasError):
    """A server's program is not installed: retried with backoff, so installing it is enough."""


@dataclass(frozen=True)
class Launcher:
    name: str  # npx, uvx, pipx
    install: str  # what to install when it is missing
    registry_variables: tuple[str, ...]  # environment variables naming another registry
    default_hosts: tuple[str, ...]

    def registry_hosts(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The hosts it installs from: those the environment names, else the public registry."""
        named = [urlsplit(env[v]).hostname for v in self.registry_variables if env.get(v)]
        hosts = tuple(h.lower() for h in named if h)
        return hosts or self.default_hosts

    def data_env(self, data: Path) -> dict[str, str]:
        """Its caches and install folders inside the server's data folder."""
        if self.name == "npx":
            return {
                "npm_config_cache": str(data / ".npm"),
                "npm_config_prefix": str(data / ".npm-global"),
                "npm_config_update_notifier": "false",
                # What the cache holds is used without asking the registry: the next start
                # needs no network (npx would otherwise revalidate, and retry for minutes).
                "npm_config_prefer_offline": "true",
            }
        if self.name == "uvx":
            return {
                "UV_CACHE_DIR": str(data / ".cache" / "uv"),
                "UV_TOOL_DIR": str(data / ".local" / "share" / "uv" / "tools"),
                "UV_PYTHON_INSTALL_DIR": str(data / ".local" / "share" / "uv" / "python"),
            }
        return {
            "PIPX_HOME": str(data / ".local" / "pipx"),
            "PIPX_BIN_DIR": str(data / ".local" / "bin"),
            "PIP_CACHE_DIR": str(data / ".cache" / "pip"),
        }


NPX = Launcher(
    "npx",
    "Node.js with npm (`apt-get install nodejs npm`, or https://nodejs.org)",
    ("npm_config_registry", "NPM_CONFIG_REGISTRY"),
    (NPM_HOST,),
)
UVX = Launcher(
    "uvx",
    "uv (`pipx install uv`, or https://docs.astral.sh/uv/getting-started/installation/)",
    ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_INDEX_URL"),
    PYPI_HOSTS,
)
PIPX = Launcher(
    "pipx",
    "pipx (`apt-get install pipx`, or `python3 -m pip install --user pipx`)",
    ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"),
    PYPI_HOSTS,
)


def launcher_of(command: str, args: Sequence[str]) -> Launcher | None:
    """The launcher a server's command is, by the program's name: `npx`, `npm exec`, `uvx`,
    `uv tool run`, `pipx run`; None for any other program."""
    program = Path(command).name
    if program == "npx" or (program == "npm" and args[:1] in (["exec"], ["x"])):
        return NPX
    if program == "uvx" or (program == "uv" and args[:2] == ["tool", "run"]):
        return UVX
    if program == "pipx" and args[:1] == ["run"]:
        return PIPX
    return None


def missing_program(command: str, path: str | None) -> str | None:
    """Why `command` cannot be started with this PATH (the sandbox's), or None."""
    if "/" in command:
        return None if os.access(command, os.X_OK) else f"{command} is not an executable file"
    if shutil.which(command, path=path) is None:
        return f"{command} is not installed (not found on the PATH {path or '(empty)'})"
    return None


def check_program(where: str, command: str, args: Sequence[str], path: str | None) -> None:
    """Raise ProgramMissing naming a launcher that is not installed, and what to install."""
    problem = missing_program(command, path)
    if problem is None:
        return
    launcher = launcher_of(command, args)
    fix = f"install {launcher.install}" if launcher else "install it, or give its full path"
    raise ProgramMissing(f"{where}: {problem}; {fix} (Atlas tries again with backoff)")


def unseen_path(
    path: Path, hidden: Sequence[Path], visible: Sequence[Path], tmp_visible: Sequence[Path]
) -> str | None:
    """Why `path` (absolute) is not what the sandbox shows, or None: under /tmp (private inside,
    unless it is in `tmp_visible`) or under a hidden folder (unless in `visible`)."""
    real = Path(os.path.realpath(path))
    for folder in visible:
        if real.is_relative_to(Path(os.path.realpath(folder))):
            return None
    for folder in hidden:
        if real.is_relative_to(Path(os.path.realpath(folder))):
            return f"{path} is inside {folder}, which the sandbox hides"
    tmp = Path(os.path.realpath("/tmp"))
    if real.is_relative_to(tmp) and not any(
        real.is_relative_to(Path(os.path.realpath(f))) for f in tmp_visible
    ):
        return f"{path} is under /tmp, which is private inside the sandbox (the server sees an empty one)"
    return None
