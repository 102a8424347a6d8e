"""`atlas executors install-plugin`: the Claude Code plugin, installed for the person's own
sessions (docs/executors.md, "The Claude Code plugin").

The plugin shipped in atlas/executors/claude_plugin/ is copied into `<home>/claude-plugins/`,
a local marketplace of one plugin, with this home and this Python baked in (the hook then finds
the daemon's socket without ATLAS_HOME). Then Claude Code's own commands install it:
`claude plugin marketplace add <that folder>` and `claude plugin install atlas@atlas-local`,
for an account's config folder when one is named. Claude Code keeps a copy of the plugin, so a
new install removes the old copy first.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError

if TYPE_CHECKING:
    from atlas.home import Home

SOURCE = Path(__file__).parent / "claude_plugin"
PLUGIN, MARKETPLACE = "atlas", "atlas-local"
HOME_FILE = "atlas-home"  # read by the hook (hooks/atlas_hook.py)
SHIPPED_PYTHON = "python3 "  # the interpreter hooks.json names, replaced by Atlas's own
CLAUDE_SECONDS = 120


def write_plugin(home: Home, python: str = sys.executable) -> Path:
    """The marketplace folder holding the plugin for this home; made anew each time."""
    root = home.root / "claude-plugins"
    target = root / PLUGIN
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / HOME_FILE).write_text(str(home.root) + "\n", encoding="utf-8")
    hooks_file = target / "hooks" / "hooks.json"
    hooks = json.loads(hooks_file.read_text(encoding="utf-8"))
    for groups in hooks["hooks"].values():
        for group in groups:
            for hook in group["hooks"]:
                if hook["command"].startswith(SHIPPED_PYTHON):
                    rest = hook["command"][len(SHIPPED_PYTHON) :]
                    hook["command"] = f"{shlex.quote(python)} {rest}"
    hooks_file.write_text(json.dumps(hooks, indent=2) + "\n", encoding="utf-8")
    manifest = {
        "name": MARKETPLACE,
        "owner": {"name": "Atlas"},
        "description": f"The Claude Code plugin of the Atlas home {home.root}",
        "plugins": [
            {
                "name": PLUGIN,
                "source": f"./{PLUGIN}",
                "description": "Your sessions on Atlas's workbench; their prompts through Atlas",
            }
        ],
    }
    (root / ".claude-plugin").mkdir(parents=True, exist_ok=True)
    (root / ".claude-plugin" / "marketplace.json").write_text(
        json.dumps(manifest, indent=2) + "\n", encoding="utf-8"
    )
    return root


def install_steps(binary: str, root: Path) -> list[tuple[list[str], bool]]:
    """Claude Code's commands, each with whether its failure matters (removing a plugin that
    is not installed fails, and is fine)."""
    plugin = f"{PLUGIN}@{MARKETPLACE}"
    return [
        ([binary, "plugin", "marketplace", "add", str(root)], True),
        ([binary, "plugin", "marketplace", "update", MARKETPLACE], True),
        ([binary, "plugin", "uninstall", plugin], False),
        ([binary, "plugin", "install", plugin], True),
    ]


def install_plugin(home: Home, account: str | None, print_only: bool) -> int:
    from atlas.executors.accounts import accounts_of

    settings = home.settings.executors.get("claude-code")
    env = dict(os.environ)
    if account is not None:
        listed = {}
        if settings is not None:
            listed = {a.nickname: a for a in accounts_of("claude-code", settings, "~/.claude")}
        if account not in listed:
            known = ", ".join(sorted(listed)) or "none: [executors.claude-code] lists no accounts"
            raise AtlasError(f"no Claude Code account {account!r} in config.toml (known: {known})")
        env["CLAUDE_CONFIG_DIR"] = str(listed[account].config_dir)
    root = write_plugin(home)
    print(f"wrote the plugin for {home.root} into {root}")
    binary = (settings.binary if settings is not None else None) or "claude"
    found = shutil.which(binary)
    where = f"CLAUDE_CONFIG_DIR={shlex.quote(env['CLAUDE_CONFIG_DIR'])} " if account else ""
    steps = install_steps(found or binary, root)
    if print_only or found is None:
        if found is None:
            print(f"{binary} is not on the PATH; install the plugin with Claude Code's commands:")
        for argv, _ in steps:
            print("  " + where + shlex.join(argv))
        print(f"(or for one session: claude --plugin-dir {shlex.quote(str(root / PLUGIN))})")
        return 0
    for argv, matters in steps:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=CLAUDE_SECONDS, check=False
        )
        if done.returncode != 0 and matters:
            said = (done.stderr or done.stdout).strip()
            raise AtlasError(f"`{shlex.join(argv)}` failed ({done.returncode}): {said}")
    print(f"installed {PLUGIN}@{MARKETPLACE} in Claude Code{' for ' + account if account else ''}")
    print(
        "new Claude Code sessions report to Atlas; their prompts reach you while `atlas run` runs"
    )
    return 0


def add_executors_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    executors = sub.add_parser("executors", help="the outside coding harnesses (Claude Code...)")
    actions = executors.add_subparsers(dest="executors_command", required=True, metavar="ACTION")
    install = actions.add_parser(
        "install-plugin",
        help="install Atlas's Claude Code plugin: your sessions on the workbench, their "
        "permission prompts through Atlas",
    )
    install.add_argument(
        "--account", help="the [executors.claude-code] account to install it for (its folder)"
    )
    install.add_argument(
        "--print", action="store_true", help="write the plugin, print Claude Code's commands"
    )
    install.set_defaults(func=_cmd_install)


def _cmd_install(args: argparse.Namespace) -> int:
    from atlas.home import Home, default_home

    home = Home(Path(args.home).expanduser() if args.home else default_home())
    return install_plugin(home, args.account, args.print)
