"""The executors' plain data about accounts, and their error (re-exported by base.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from atlas.errors import AtlasError

UNKNOWN = "unknown"  # what executor_accounts says where the harness's files do not tell


class ExecutorError(AtlasError):
    """An executor could not start or act; the message says what and how to fix it."""


# --- accounts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    """One login of a harness: its own config folder (CLAUDE_CONFIG_DIR, CODEX_HOME)."""

    executor: str  # `claude-code`
    nickname: str  # `work`
    config_dir: Path
    main: bool = False

    @property
    def target(self) -> str:
        """The target name `delegate` takes: `claude-code@work`."""
        return f"{self.executor}@{self.nickname}"


@dataclass(frozen=True)
class LimitWindow:
    """One of a plan's limit windows (five hours, a week...), as far as the harness tells."""

    name: str  # `five_hour`, `seven_day`, `primary (300 min)`
    used_percent: float | None = None  # None: unknown
    resets_at: datetime | None = None  # None: unknown
    status: str = UNKNOWN  # `allowed`, `warning`, `rejected` or unknown


@dataclass(frozen=True)
class AccountStatus:
    """What executor_accounts shows for one account, read with no model call."""

    target: str
    logged_in_as: str  # an email, `API key`, `not logged in` or unknown
    plan: str  # `max`, `pro`, `plus`... or unknown
    windows: tuple[LimitWindow, ...]  # empty: no usage known
    at_limit: bool | None  # None: unknown
    at_limit_until: datetime | None
    extra_usage: bool | None  # bills past its limits; None: unknown
    folders: tuple[str, ...]  # the folders that start on this account
    main: bool
    config_dir: str
    notes: tuple[str, ...] = ()  # where each answer came from, or why it is unknown
