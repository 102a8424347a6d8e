"""RuleGate: the approval gate's rules for every tool call (docs/trust.md).

Commands (run_command, and browser_exec's code) are judged by `rules.classify`, off the event
loop with a time limit: hardline → the user's deny list → actions outside the machine →
dangerous patterns, which go to the guardian unless the mode is auto. A command that asks to
leave the sandbox is put to a person every time. File tools (read_file, write_file, edit_file,
find_files, attach_file) never reach the vault; the Atlas home outside the bot's workspace is
asked, its settings and databases are never written, memory and skills change only through their
own tools; writes never reach system folders, and a write anywhere else outside the bot's
view (its workspace and granted folders) is asked every time. What the view hides
(atlas/sandbox/view.py) is allowed to the tool, which answers as for a missing file.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from atlas.errors import ToolError
from atlas.home import Home
from atlas.mcp.tools import mcp_gate_rule
from atlas.providers.base import ToolCall
from atlas.store.home_db import HomeStore
from atlas.tools.agents import bot_create_question
from atlas.tools.delegate_executors import gate_rule as delegate_gate_rule
from atlas.tools.fences import Fence, inside, vault_of, write_refusal
from atlas.tools.file_batch import called_paths
from atlas.tools.paths import note_judged_path, note_refused_path, resolve_path
from atlas.tools.registry import RunContext, Tool, effective_mode
from atlas.trust.gate import Allow, Ask, BaseGate, Decision, Deny, never_remembered
from atlas.trust.guardian import Guardian
from atlas.trust.read_taint import carried_question
from atlas.trust.stored_text import judge_stored_texts, stored_texts
from atlas.trust.verdict import Verdict

log = logging.getLogger(__name__)

PATH_TOOLS = {"read_file", "write_file", "edit_file", "find_files", "attach_file"}
WRITING_TOOLS = {"write_file", "edit_file"}
# Home areas a file tool reads without asking: the bot's own notes and skills (it sees them in
# its prompt anyway) and what Atlas itself tells it to read (spilled results, job logs).
READ_FREE_AREAS = {"workspace", "outside", "own-memory", "own-skills", "own-scratch"}
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
JUDGE_TIMEOUT_S = 2.0  # classify() longer than this is not waited for: the command is asked
ESCAPE_SHOWN_CHARS = 2000  # a command to run unsandboxed is shown whole, or not run
# Judging runs here, not on the event loop; a judgment that never ends holds one of these
# threads, not the loop (and not the default executor the file tools use).
_JUDGES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="atlas-gate")
# Commands that only look: in read-only mode without a sandbox anything else asks.
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


def clearly_read_only(command: str) -> bool:
    """True when every part of the command only reads (and nothing is redirected into a file)."""
    if ">" in command.replace("2>&1", "").replace(">/dev/null", ""):
        return False
    from atlas.trust.parser.normalise import normalise

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
    judge_timeout: float = JUDGE_TIMEOUT_S

    def __init__(self, home: Home, guardian: Guardian | None, audit: HomeStore | None) -> None:
        trust = home.settings.trust
        self.home = home
        self.guardian = guardian
        self.audit = audit
        self.ask_timeout = trust.ask_timeout
        self.vault = vault_of(home)

    @property
    def sandbox_enabled(self) -> bool:
        """config.toml's [sandbox] enabled (default true): commands run in the sandbox."""
        return bool(getattr(getattr(self.home.settings, "sandbox", None), "enabled", True))

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        if (mcp_ask := mcp_gate_rule(call, tool, run)) is not None:
            return mcp_ask
        try:
            args = tool.parse_arguments(call.arguments)
        except ToolError:
            return Allow("the tool itself refuses these arguments", "arguments")
        if (carried := carried_question(tool.name, args, run)) is not None:
            return carried  # an address carrying what was read outside the workspace
        if tool.name == "bot_create":  # a new bot is a lasting change: always the user's call
            return bot_create_question(args)
        if tool.name == "delegate" and (ask := delegate_gate_rule(args, run)) is not None:
            return ask  # the person's own sessions, an account's login: theirs, every time
        if tool.name == "delegate" and args.get("executor") and args.get("tasks"):
            folders = [t["folder"] for t in args["tasks"] if t.get("folder")]
            if (judged := self._executor_folders(folders, run)) is not None:
                return judged
        if tool.name in PATH_TOOLS and (paths := called_paths(args)):
            if len(paths) == 1:
                return self._path_rules(tool.name, paths[0], run)
            return self._several_paths(tool.name, paths, run)
        if tool.name == "run_command" and (args.get("command") or args.get("until")):
            cwd = resolve_path(run, args["cwd"]) if args.get("cwd") else run.bot.workspace
            escape = args.get("sandbox", True) is False and self.sandbox_enabled
            # `until`'s check runs too: judged with the command as one script, the worst
            # part deciding, so a check that would be asked or denied alone is asked or denied.
            script = "\n".join(part for part in (args.get("command"), args.get("until")) if part)
            return await self._command(script, call, run, cwd, escape=escape)
        if tool.name == "browser_exec" and args.get("code"):
            return await self._code(args["code"], call, run)
        if texts := stored_texts(tool.name, args):  # memory, skills: read later as instructions
            return await judge_stored_texts(
                self.guardian,
                model_name=self.home.settings.trust.guardian_model or run.bot.model,
                tool=tool.name,
                texts=texts,
                user_request=await _last_user_request(run),
                auto=effective_mode(run) == "auto",
            )
        return Allow("no rule applies to this tool")

    # ---- file tools ------------------------------------------------------------------------

    def _path_rules(self, tool: str, raw_path: str, run: RunContext) -> Decision:
        try:
            path = resolve_path(run, raw_path)  # symlinks and `..` resolved before any check
        except ToolError:
            return Allow("the tool itself refuses this path", "arguments")
        note_judged_path(run, tool, raw_path, path)  # the tool opens this path, not a new lookup
        fence = Fence.for_run(run)
        writing = tool in WRITING_TOOLS
        if not writing and not fence.view.sees(path):  # the tool answers "no such file"
            return Allow("outside the bot's view: the tool finds nothing there", "view:hidden")
        area = fence.area(path)
        if reason := fence.unreachable(path, str(path)):
            return Deny(reason, f"files:{area}")
        if writing and (reason := write_refusal(area, str(path))):
            return Deny(reason, f"files:{area.removeprefix('own-')}")
        if area not in ("workspace", "outside"):
            if not writing and area in READ_FREE_AREAS:
                return Allow(f"reading the bot's own {area.removeprefix('own-')} files")
            action = "change" if writing else "read"
            return Ask(
                f"{tool} wants to {action} {path}, in the Atlas home ({fence.home}) outside "
                "this bot's workspace. Allow?",
                "home:files",
            )
        if not writing:
            return Allow("reading outside the vault and the home")
        if area == "workspace":  # even when the home lives under /var or /opt
            return Allow("writing in the bot's workspace")
        if any(inside(path, root) for root in SYSTEM_ROOTS):
            return Deny(f"{path} is a system path; Atlas does not write there", "files:system")
        if fence.view.may_write(path):
            return Allow("writing in a folder granted writable to this bot")
        # The person's start-up files, autostart entries, units and tool configs run code
        # later, unsandboxed: a write outside the view is theirs to allow, each time.
        return Ask(
            f"{tool} wants to write {path}, outside what this bot may write (its workspace"
            f"{' and granted folders' if fence.view.writable else ''}). Allow this once?",
            "sandbox:write-outside",
        )

    def _several_paths(self, tool: str, paths: list[str], run: RunContext) -> Decision:
        """A call naming several files (reads, files, edits): each path judged as a call of its
        own. A refused path fails alone (the tool reports the gate's reason for it); the paths
        to ask about are asked in one question; the call is refused only when every path is."""
        decisions = {raw: self._path_rules(tool, raw, run) for raw in dict.fromkeys(paths)}
        refused = {raw: d for raw, d in decisions.items() if isinstance(d, Deny)}
        if len(refused) == len(decisions):
            return Deny(
                "; ".join(d.reason for d in refused.values()), next(iter(refused.values())).rule
            )
        for raw, denial in refused.items():
            note_refused_path(run, tool, raw, denial.reason)
        asks = [d for d in decisions.values() if isinstance(d, Ask)]
        if not asks:
            return Allow(f"each of the {len(decisions) - len(refused)} paths is allowed")
        # The strictest rule names the question: one asked every time keeps it so.
        rule = next((a.rule for a in asks if never_remembered(a)), asks[0].rule)
        return Ask("\n".join(a.question for a in asks), rule)

    def _executor_folders(self, folders: list[str], run: RunContext) -> Decision | None:
        """An executor task writes anywhere in its folder: never the vault or a system folder;
        the Atlas home (outside the bot's workspace) or a folder holding the person's whole home
        is theirs to allow, every time."""
        fence = Fence.for_run(run)
        person = Path.home().resolve()
        for raw in folders:
            try:
                path = resolve_path(run, raw)
            except ToolError:
                continue  # the tool says what is wrong with it
            area = fence.area(path)
            if reason := fence.unreachable(path, str(path)):
                return Deny(f"{reason}; no executor works there either", f"files:{area}")
            if path == Path("/") or any(inside(path, root) for root in SYSTEM_ROOTS):
                return Deny(f"{path} is a system folder; no executor works there", "files:system")
            if area not in ("workspace", "outside") or inside(fence.home, path):
                return Ask(
                    f"delegate wants an executor to change files in {path}, in or around the "
                    f"Atlas home ({fence.home}), outside this bot's workspace. Allow?",
                    "home:executor-folder",
                )
            if inside(person, path):
                return Ask(
                    f"delegate wants an executor to work in {path}, which holds your whole home "
                    "folder (it could change any file in it). Allow?",
                    "workbench:broad-folder",
                )
            if (
                area == "outside"
                and inside(path, fence.view.person)
                and not fence.view.may_write(path)
            ):
                # The executor's sandbox makes its folder writable: in the person's hidden home
                # that is a write outside the view, as write_file's would be (asked each time).
                return Ask(
                    f"delegate wants an executor to change files in {path}, outside what this "
                    "bot may write (its workspace and granted folders). Allow this once?",
                    "sandbox:write-outside",
                )
        return None

    # ---- commands --------------------------------------------------------------------------

    async def _judge(self, fn: Any, *args: Any, **kwargs: Any) -> Verdict:
        """Run a judgment off the event loop; one that takes too long is asked instead."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(_JUDGES, functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.wait_for(future, self.judge_timeout)
        except TimeoutError:
            return Verdict(
                "ask", "opaque:timeout", "too complex to judge quickly; a person decides"
            )
        except Exception:  # a fault in the rules must never let a call through, nor end the turn
            log.exception("gate: judging failed; the call is asked")
            return Verdict(
                "ask", "opaque:judge-error", "the gate could not judge it; a person decides"
            )

    def _classify_kwargs(self, run: RunContext, cwd: Path | None) -> dict[str, Any]:
        return {
            "auto": effective_mode(run) == "auto",
            "deny": self.home.settings.trust.deny,
            "home": self.home.root,
            "cwd": cwd,
            "workspace": run.bot.workspace,
            "vault": self.vault,
        }

    async def _command(
        self, command: str, call: ToolCall, run: RunContext, cwd: Path, *, escape: bool = False
    ) -> Decision:
        verdict = await self._judge(_classify, command, **self._classify_kwargs(run, cwd))
        if escape:
            return self._escape(verdict, command)
        if (
            verdict.verdict == "allow"
            and effective_mode(run) == "read-only"
            and not self.sandbox_enabled  # with the sandbox, read-only mode makes nothing writable
            and (await self._judge(_read_only_verdict, command)).verdict != "allow"
        ):
            return Ask(
                f"Read-only mode: run `{command}`? It may change something.", "mode:read-only"
            )
        return await self._verdict(verdict, command, call, run)

    def _escape(self, verdict: Verdict, command: str) -> Decision:
        """Leaving the sandbox: a person's choice every time, in every mode, the command shown
        whole; a hardline block stays a block."""
        if verdict.verdict == "block":
            return Deny(f"blocked by rule {verdict.rule}: {verdict.reason}", verdict.rule)
        if len(command) > ESCAPE_SHOWN_CHARS:
            return Deny(
                f"a command to run outside the sandbox is shown whole for approval, and this "
                f"one is over {ESCAPE_SHOWN_CHARS} characters; write it to a script in the "
                "workspace and ask to run that",
                "sandbox:escape",
            )
        flagged = "" if verdict.verdict == "allow" else f"\nAlso flagged: {verdict.reason}."
        return Ask(
            "run_command wants to run this OUTSIDE the sandbox, with your full rights (it "
            f"failed inside it):\n{command}{flagged}\nWhat the bot wrote in its folder runs "
            "with it too (scripts, git hooks, build files). Allow?",
            "sandbox:escape",
        )

    async def _code(self, code: str, call: ToolCall, run: RunContext) -> Decision:
        """Browser code is Python: judged by what it would do, like run_command."""
        worst = await self._judge(_worst_of_code, code, self._classify_kwargs(run, None))
        if worst is None:
            return Allow("the code runs no command")
        return await self._verdict(worst, code, call, run)

    async def _verdict(
        self, verdict: Verdict, subject: str, call: ToolCall, run: RunContext
    ) -> Decision:
        shown = subject  # whole: a person approves what they see (channels fold a long one)
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


def _read_only_verdict(command: str) -> Verdict:
    if clearly_read_only(command):
        return Verdict("allow", "mode:read-only", "only reads")
    return Verdict("ask", "mode:read-only", "may change something")


def _classify(command: str, **kwargs: Any) -> Verdict:
    """rules.classify, loaded with the shell grammar by the first command judged (in a judge's
    thread, within its time): a first answer that runs no command does without them."""
    from atlas.trust.rules import classify

    return classify(command, **kwargs)


def _worst_of_code(code: str, kwargs: dict[str, Any]) -> Verdict | None:
    from atlas.trust.parser.normalise import code_parts

    order = {"block": 0, "ask": 1, "guardian": 2, "allow": 3}
    kwargs = {k: v for k, v in kwargs.items() if k != "cwd"}
    verdicts = [_classify(part.text, **kwargs) for part in code_parts("python", code)]
    return min(verdicts, key=lambda v: order[v.verdict], default=None)


async def _last_user_request(run: RunContext) -> str:
    if run.open_store is None:
        return "(unknown)"
    store = await run.open_store(run.bot)
    for message in reversed(await store.history(run.conversation_id)):
        if message.role == "user":
            return message.content
    return "(none)"
