"""The executor interface: an outside coding harness (Claude Code, Codex) behind one shape.

An `Executor` is one harness with its accounts. `start(task)` runs the harness headless in the
task's folder, inside the sandbox, and returns an `ExecutorInstance`: its `events()` yield the
typed events below until the harness exits; `steer`, `answer` and `stop` act on it while it runs.
A task with `session_id` set resumes that session (`--resume`, `codex exec resume`).

Plugins implement these two classes and register the executor under the `atlas.executors`
entry-point group (atlas/plugins.py, SDK version 2).
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from atlas.executors.model import (  # noqa: F401 (part of this module's interface)
    UNKNOWN,
    Account,
    AccountStatus,
    ExecutorError,
    LimitWindow,
)

if TYPE_CHECKING:
    from atlas.config import ExecutorSettings
    from atlas.executors.launch import ExecutorLauncher
    from atlas.executors.limits import LimitBook
    from atlas.sandbox.proxy import DomainAsker

EXECUTOR_SDK_VERSION = 2  # atlas.plugins.SDK_VERSIONS["atlas.executors"]


# --- the events of a running instance ---------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class SessionStarted:
    """The harness named its session: resume it with this id (Claude's session_id, Codex's
    thread_id)."""

    session_id: str
    model: str | None = None
    kind: ClassVar[str] = "session"


@dataclass(frozen=True)
class AssistantText:
    text: str
    kind: ClassVar[str] = "text"


@dataclass(frozen=True)
class ToolUse:
    tool: str  # `Bash`, `Edit`; Codex: `command_execution`, `file_change`, `mcp:<server>/<tool>`
    input: Mapping[str, Any]
    tool_use_id: str = ""
    kind: ClassVar[str] = "tool_use"


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    output: str
    is_error: bool = False
    kind: ClassVar[str] = "tool_result"


@dataclass(frozen=True)
class PermissionRequest:
    """The harness asks before a tool runs. Answer with `instance.answer(request_id,
    Decision(...))`; until then the harness waits."""

    request_id: str
    tool: str
    input: Mapping[str, Any]
    reason: str = ""  # why the harness asks, when it says
    kind: ClassVar[str] = "permission"


@dataclass(frozen=True)
class QuestionItem:
    question: str
    choices: tuple[str, ...] = ()
    multi_select: bool = False
    header: str = ""


@dataclass(frozen=True)
class Question:
    """The harness asks the person something (Claude's AskUserQuestion, Codex's
    request_user_input). Answer with `instance.answer(request_id, {question: answer})`."""

    request_id: str
    questions: tuple[QuestionItem, ...]
    kind: ClassVar[str] = "question"


@dataclass(frozen=True)
class Result:
    """The end of one turn: the final text, usage and cost (None where the harness does not say,
    as Codex does not)."""

    text: str
    is_error: bool = False
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    session_id: str | None = None
    turns: int | None = None
    subtype: str = "success"
    kind: ClassVar[str] = "result"


@dataclass(frozen=True)
class LimitReached:
    """The account reached its plan's limit; the task can go on elsewhere (delegate's route)."""

    message: str
    resets_at: datetime | None = None  # None: the harness did not say
    window: str | None = None  # `five_hour`, `seven_day`...
    kind: ClassVar[str] = "limit"


@dataclass(frozen=True)
class Failure:
    """The harness failed (an error event, an exit without a result, bad output)."""

    message: str
    exit_code: int | None = None
    kind: ClassVar[str] = "error"


ExecutorEvent = (
    SessionStarted
    | AssistantText
    | ToolUse
    | ToolResult
    | PermissionRequest
    | Question
    | Result
    | LimitReached
    | Failure
)


@dataclass(frozen=True)
class Decision:
    """The answer to a PermissionRequest."""

    allow: bool
    message: str = ""  # told to the harness when denied
    updated_input: Mapping[str, Any] | None = None  # allow with a changed input


Answer = Decision | Mapping[str, str]  # a permission decision, or question -> answer


# --- starting and running ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """What to start: the prompt in a folder on an account; `session_id` resumes a session."""

    folder: Path
    prompt: str
    account: Account
    session_id: str | None = None
    model: str | None = None  # the harness's own model name; None: its default
    # Claude Code's --permission-mode (`default` asks before edits and commands, `acceptEdits`
    # lets edits in the folder pass); None: the harness's default. Codex asks nothing.
    permission_mode: str | None = None
    bot: str | None = None  # the bot that delegated: the executor runs in its view
    # Asked about a host outside the harness's own (its provider's, its allowed_domains): the
    # person's yes or no, through the proxy as for commands. None: nobody to ask, refused.
    ask_host: DomainAsker | None = None


SteerOutcome = Literal["sent", "queued"]  # delivered into the running turn, or after it


class ExecutorInstance(abc.ABC):
    """One running task of a harness. `events()` may be iterated once; it ends when the
    harness has exited (after a final Result, a LimitReached or a Failure)."""

    def __init__(self, task: TaskSpec) -> None:
        self.task = task
        self.session_id: str | None = task.session_id

    @property
    def account(self) -> Account:
        return self.task.account

    @abc.abstractmethod
    def events(self) -> AsyncIterator[ExecutorEvent]:
        """The harness's events, typed, in order."""

    @abc.abstractmethod
    async def steer(self, message: str) -> SteerOutcome:
        """More input for the task: into the running turn where the harness reads it, else after
        the current turn (in the same session). Raises ExecutorError once the instance ended."""

    @abc.abstractmethod
    async def answer(self, request_id: str, answer: Answer) -> None:
        """Answer a PermissionRequest (a Decision) or a Question (question -> answer)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """End the task now: the harness and everything it started (the sandbox ends)."""

    @property
    @abc.abstractmethod
    def running(self) -> bool:
        """Whether the harness is still running."""


@dataclass(frozen=True)
class LogEntry:
    """One entry of a harness's own session log, reduced to what a person reads."""

    index: int
    role: str  # `user`, `assistant`, `tool`, `system`
    text: str
    at: datetime | None = None
    tool: str | None = None  # for role `tool`: its name


@dataclass(frozen=True)
class SessionLog:
    """A harness's own session log, read back. `deleted` when the file is gone: deleted by
    the harness (Claude Code, after `cleanupPeriodDays`) or never written; `why_missing` says
    which, when the caller knows the session's age (atlas/executors/session_gone.py)."""

    session_id: str
    path: Path | None
    entries: tuple[LogEntry, ...] = ()
    deleted: bool = False
    # When `deleted`: why it is missing, in a sentence (atlas/executors/session_gone.py).
    why_missing: str = ""

    def head(self, count: int = 5) -> tuple[LogEntry, ...]:
        return self.entries[:count]

    def tail(self, count: int = 5) -> tuple[LogEntry, ...]:
        return self.entries[-count:] if count else ()

    def around(self, index: int, window: int = 5) -> tuple[LogEntry, ...]:
        return tuple(e for e in self.entries if abs(e.index - index) <= window)


class Executor(abc.ABC):
    """One harness with its accounts. Made by the registry from its `[executors.<name>]`
    settings; `launcher` puts each run inside the sandbox (atlas/executors/launch.py)."""

    name: ClassVar[str]  # the entry-point name: `claude-code`
    sdk_version: ClassVar[int] = EXECUTOR_SDK_VERSION
    default_binary: ClassVar[str]  # `claude`
    default_config_dir: ClassVar[str]  # `~/.claude`
    config_env: ClassVar[str]  # the variable naming an account's folder: CLAUDE_CONFIG_DIR
    provider_hosts: ClassVar[tuple[str, ...]]  # what the harness must reach, via the proxy

    def __init__(
        self,
        settings: ExecutorSettings,
        launcher: ExecutorLauncher,
        book: LimitBook | None = None,
    ) -> None:
        self.settings = settings
        self.launcher = launcher
        self.book = book  # where the limits seen in the harness's events are kept

    # accounts (shared: every harness keeps an account in a config folder)

    @property
    def binary(self) -> str:
        return self.settings.binary or self.default_binary

    def accounts(self) -> list[Account]:
        """The accounts from config, the main one marked; one `main` account by default."""
        from atlas.executors.accounts import accounts_of

        return accounts_of(self.name, self.settings, self.default_config_dir)

    def account(self, nickname: str | None = None, folder: Path | None = None) -> Account:
        """The account by nickname; else the one the folder starts on; else the main one."""
        from atlas.executors.accounts import pick_account

        return pick_account(self.name, self.accounts(), self.settings, nickname, folder)

    # running

    @abc.abstractmethod
    async def start(self, task: TaskSpec) -> ExecutorInstance:
        """The task's instance (with task.session_id: resuming that session). Raises
        ExecutorError for a wrong account or a binary not found; the harness itself starts when
        `events()` is first iterated, which raises ExecutorError where it cannot (no sandbox,
        no socat, no folder: fail closed)."""

    def check_binary(self) -> None:
        """Raises ExecutorError naming the fix when the harness's binary is not found."""
        import shutil

        if shutil.which(self.binary) is None:
            raise ExecutorError(
                f"{self.name}: {self.binary!r} is not found (install it, or set binary under "
                f"[executors.{self.name}] in config.toml; docs/executors.md)"
            )

    @abc.abstractmethod
    def version_argv(self) -> list[str]:
        """The command that prints the harness's version (`claude --version`)."""

    def account_env(self, account: Account) -> dict[str, str]:
        """The environment that points the harness at this account's folder."""
        return {self.config_env: str(account.config_dir)}

    # What the login prints when it waits for a code pasted on its stdin (Claude Code's
    # "Paste code here if prompted >"); None: its login needs nothing typed (a device code).
    login_code_prompt: ClassVar[re.Pattern[str] | None] = None

    @abc.abstractmethod
    def login_argv(self, account: Account, email: str | None = None) -> list[str]:
        """The harness's own login for this account (run with `account_env`), which prints a
        link for the person's browser (delegate's `action: account`)."""

    @abc.abstractmethod
    def copy_session(self, source: Account, target: Account, session_id: str, folder: Path) -> None:
        """Copy a session's log into another account, so `target` can resume it (a task going
        on past its account's limit). Raises ExecutorError when the log is gone."""

    # reading back, with no model call

    @abc.abstractmethod
    def session_log(self, account: Account, session_id: str, folder: Path | None) -> SessionLog:
        """The harness's own log of a session, or SessionLog(deleted=True) when it is gone."""

    def keeps_sessions_days(self, account: Account) -> int | None:
        """Days the harness keeps a session's log before deleting it; None when it never
        deletes them (what tells a log it deleted from one it never wrote)."""
        return None

    @abc.abstractmethod
    def account_status(self, account: Account, observed: Mapping[str, Any]) -> AccountStatus:
        """Who the account is logged in as and its plan's usage, from the harness's files and
        what Atlas observed of its events (`observed`: atlas/executors/limits.py)."""
