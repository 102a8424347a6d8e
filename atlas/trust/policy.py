"""RuleGate: the approval gate's rules for every tool call (docs/trust.md).

Commands (run_command, and browser_exec's code) are judged by `rules.classify`: hardline →
the user's deny list → actions outside the machine → dangerous patterns, which go to the
guardian unless the mode is auto. File tools never reach the vault; writes never reach system
folders or the home's own settings, and ask before touching SSH configuration.
"""

from __future__ import annotations

import logging
from pathlib import Path

from atlas.errors import ToolError
from atlas.home import Home
from atlas.mcp.tools import mcp_gate_rule
from atlas.providers.base import ToolCall
from atlas.store.home_db import HomeStore
from atlas.tools.agents import bot_create_question
from atlas.tools.paths import resolve_path
from atlas.tools.registry import RunContext, Tool, effective_mode
from atlas.trust.gate import Allow, Ask, BaseGate, Decision, Deny
from atlas.trust.guardian import Guardian
from atlas.trust.normalise import code_parts, normalise
from atlas.trust.rules import Verdict, classify

log = logging.getLogger(__name__)

PATH_TOOLS = {"read_file", "write_file", "edit_file", "find_files"}
SYSTEM_ROOTS = tuple(
    Path(p)
    for p in (
        "/etc",
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/boot",
        "/sys",
        "/proc",
        "/dev",
        "/var",
        "/opt",
    )
)
HOME_SETTINGS = ("config.toml", "mcp.json", "models.toml", "atlas.db")
HOME_PRIVATE_DIRS = ("plugins", "plugin-data")
# Commands that only look: in read-only mode anything else asks.
READ_ONLY_HEADS = {
    "ls", "cat", "head", "tail", "less", "more", "grep", "rg", "egrep", "fgrep", "wc", "pwd",
    "echo", "printf", "stat", "file", "which", "whoami", "id", "date", "uname", "du", "df", "tree",
    "find", "sort", "uniq", "cut", "diff", "cmp", "md5sum", "sha256sum", "env", "printenv", "ps",
    "true", "test", "[", "basename", "dirname", "realpath", "readlink", "jq", "hostname", "uptime",
}  # fmt: skip
READ_ONLY_GIT = {
    "status",
    "log",
    "diff",
    "show",
    "branch",
    "remote",
    "rev-parse",
    "blame",
    "ls-files",
}
WRITING_FLAGS = {"-delete", "-exec", "-execdir", "-ok", "-fprint", "-o", "--output", "-i"}


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def clearly_read_only(command: str) -> bool:
    """True when every part of the command only reads (and nothing is redirected into a file)."""
    if ">" in command.replace("2>&1", "").replace(">/dev/null", ""):
        return False
    for part in normalise(command):
        words = part.split()
        if not words:
            continue
        head = words[0]
        if head == "git":
            if (
                len(words) < 2
                or words[1] not in READ_ONLY_GIT
                or {"-D", "-d", "-m", "-M"} & set(words)
            ):
                return False
        elif head not in READ_ONLY_HEADS or WRITING_FLAGS & set(words[1:]):
            return False
    return True


class RuleGate(BaseGate):
    def __init__(self, home: Home, guardian: Guardian | None, audit: HomeStore | None) -> None:
        trust = home.settings.trust
        self.home = home
        self.guardian = guardian
        self.audit = audit
        self.ask_timeout = trust.ask_timeout
        self.vault = (
            Path(trust.vault).expanduser().resolve() if trust.vault else home.root / "vault"
        )

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        if (mcp_ask := mcp_gate_rule(call, tool, run)) is not None:
            return mcp_ask
        try:
            args = tool.parse_arguments(call.arguments)
        except ToolError:
            return Allow("the tool itself refuses these arguments", "arguments")
        if tool.name == "bot_create":  # a new bot is a lasting change: always the user's call
            return bot_create_question(args)
        if tool.name in PATH_TOOLS and args.get("path"):
            return self._path_rules(tool.name, args["path"], run)
        if tool.name == "run_command" and args.get("command"):
            cwd = resolve_path(run, args["cwd"]) if args.get("cwd") else run.bot.workspace
            return await self._command(args["command"], call, run, cwd)
        if tool.name == "browser_exec" and args.get("code"):
            return await self._code(args["code"], call, run)
        return Allow("no rule applies to this tool")

    def _path_rules(self, tool: str, raw_path: str, run: RunContext) -> Decision:
        try:
            path = resolve_path(run, raw_path)  # symlinks and `..` resolved before any check
        except ToolError:
            return Allow("the tool itself refuses this path", "arguments")
        if _inside(path, self.vault.resolve()):
            return Deny(
                f"{path} is inside the vault ({self.vault}), which file tools never reach",
                "files:vault",
            )
        if tool not in ("write_file", "edit_file"):
            return Allow("reading outside the vault")
        home = self.home.root.resolve()
        if any(_inside(path, root) for root in SYSTEM_ROOTS):
            return Deny(f"{path} is a system path; Atlas does not write there", "files:system")
        if path.parent == home and path.name in HOME_SETTINGS:
            return Deny(
                f"{path} is the home's own settings; edit it yourself", "files:home-settings"
            )
        if any(_inside(path, home / d) for d in HOME_PRIVATE_DIRS):
            return Deny(f"{path} belongs to the home's plugins", "files:plugins")
        if _inside(path, (Path.home() / ".ssh").resolve()):
            return Ask(f"{tool} wants to change SSH configuration: {path}. Allow?", "files:ssh")
        return Allow("writing an ordinary file")

    async def _command(self, command: str, call: ToolCall, run: RunContext, cwd: Path) -> Decision:
        mode = effective_mode(run)
        verdict = classify(
            command,
            auto=mode == "auto",
            deny=self.home.settings.trust.deny,
            home=self.home.root,
            cwd=cwd,
        )
        if verdict.verdict == "allow" and mode == "read-only" and not clearly_read_only(command):
            return Ask(
                f"Read-only mode: run `{command}`? It may change something.", "mode:read-only"
            )
        return await self._verdict(verdict, command, call, run)

    async def _code(self, code: str, call: ToolCall, run: RunContext) -> Decision:
        """Browser code is Python: judged by what it would do, like run_command."""
        verdicts = [
            classify(
                part.text,
                auto=effective_mode(run) == "auto",
                deny=self.home.settings.trust.deny,
                home=self.home.root,
            )
            for part in code_parts("python", code)
        ]
        order = {"block": 0, "ask": 1, "guardian": 2, "allow": 3}
        worst = min(verdicts, key=lambda v: order[v.verdict], default=None)
        if worst is None:
            return Allow("the code runs no command")
        return await self._verdict(worst, code, call, run)

    async def _verdict(
        self, verdict: Verdict, subject: str, call: ToolCall, run: RunContext
    ) -> Decision:
        shown = subject if len(subject) <= 300 else subject[:300] + "…"
        if verdict.verdict == "block":
            return Deny(f"blocked by rule {verdict.rule}: {verdict.reason}", verdict.rule)
        if verdict.verdict == "ask":
            return Ask(f"{call.name}: `{shown}` — {verdict.reason}. Allow?", verdict.rule)
        if verdict.verdict == "guardian":
            return await self._guardian(verdict, shown, call, run)
        return Allow(verdict.reason, verdict.rule)

    async def _guardian(
        self, verdict: Verdict, shown: str, call: ToolCall, run: RunContext
    ) -> Decision:
        if self.guardian is None:
            return Ask(f"{call.name}: `{shown}` — {verdict.reason}. Allow?", verdict.rule)
        judgement = await self.guardian.judge(
            model_name=self.home.settings.trust.guardian_model or run.bot.model,
            tool=call.name,
            arguments=call.arguments,
            flagged=verdict.reason,
            user_request=await _last_user_request(run),
        )
        reason = f"guardian: {judgement.reason}"
        if judgement.verdict == "approve":
            return Allow(reason, verdict.rule, "guardian")
        if judgement.verdict == "deny":
            return Deny(reason, verdict.rule, "guardian")
        return Ask(
            f"{call.name}: `{shown}` — {verdict.reason}; {reason}. Allow?", verdict.rule, "guardian"
        )


async def _last_user_request(run: RunContext) -> str:
    if run.open_store is None:
        return "(unknown)"
    store = await run.open_store(run.bot)
    for message in reversed(await store.history(run.conversation_id)):
        if message.role == "user":
            return message.content
    return "(none)"
