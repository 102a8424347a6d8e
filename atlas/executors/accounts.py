"""Executors' accounts: from config to `Account`s, which one a folder starts on, and what
executor_accounts shows of each (read from the harnesses' files, no model call)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.executors.model import Account, AccountStatus, ExecutorError, LimitWindow

if TYPE_CHECKING:
    from atlas.config import ExecutorSettings
    from atlas.executors.base import Executor
    from atlas.executors.limits import LimitBook


def expand(raw: str) -> Path:
    return Path(os.path.expanduser(raw)).resolve()


def accounts_of(executor: str, settings: ExecutorSettings, default_dir: str) -> list[Account]:
    """The configured accounts in order, or one `main` in the harness's default folder."""
    listed = settings.accounts or {"main": default_dir}
    main = settings.main or next(iter(listed))
    return [
        Account(executor, nickname, expand(folder), main=nickname == main)
        for nickname, folder in listed.items()
    ]


def folder_account(settings: ExecutorSettings, folder: Path) -> str | None:
    """The nickname the folder (or the nearest folder around it) starts on, if config says."""
    best: tuple[int, str] | None = None
    real = folder.expanduser().resolve()
    for raw, nickname in settings.folders.items():
        start = expand(raw)
        if real == start or start in real.parents:
            depth = len(start.parts)
            if best is None or depth > best[0]:
                best = (depth, nickname)
    return best[1] if best else None


def pick_account(
    executor: str,
    accounts: list[Account],
    settings: ExecutorSettings,
    nickname: str | None,
    folder: Path | None,
) -> Account:
    by_name = {account.nickname: account for account in accounts}
    if nickname is None and folder is not None:
        nickname = folder_account(settings, folder)
    if nickname is None:
        return next(account for account in accounts if account.main)
    if nickname not in by_name:
        raise ExecutorError(
            f"{executor} has no account {nickname!r} (accounts: "
            f"{', '.join(a.target for a in accounts)}); add it under [executors.{executor}] "
            "accounts in config.toml"
        )
    return by_name[nickname]


def parse_target(target: str) -> tuple[str, str | None]:
    """`claude-code@work` -> ("claude-code", "work"); `codex` -> ("codex", None)."""
    executor, _, nickname = target.partition("@")
    return executor, (nickname or None)


def folders_of(settings: ExecutorSettings, account: Account) -> tuple[str, ...]:
    return tuple(raw for raw, nickname in settings.folders.items() if nickname == account.nickname)


def hand_over(executor: Executor, account: Account) -> list[str]:
    """Where a task on `account` goes on when it reaches its limit, in order (target names)."""
    if executor.settings.hand_over is not None:
        return [t for t in executor.settings.hand_over if t != account.target]
    return [a.target for a in executor.accounts() if a != account]


def parse_time(value: object) -> datetime | None:
    """A time the harnesses write (an ISO string, "Z" or an offset, or epoch seconds), aware;
    None for anything else."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def observed_windows(observed: dict) -> list[LimitWindow]:  # type: ignore[type-arg]
    """The windows Atlas saw in the harness's events (LimitBook), as LimitWindows."""
    windows = []
    for name, info in sorted((observed.get("windows") or {}).items()):
        used = info.get("used_percent")
        windows.append(
            LimitWindow(
                name=name,
                used_percent=float(used) if isinstance(used, int | float) else None,
                resets_at=parse_time(info.get("resets_at")),
                status=str(info.get("status") or "unknown"),
            )
        )
    return windows


def limit_state(
    observed: dict,  # type: ignore[type-arg]
    windows: list[LimitWindow],
    now: datetime | None = None,
) -> tuple[bool | None, datetime | None]:
    """At its limit now (reached here, or by its usage), and until when if known."""
    now = now or datetime.now(UTC)
    limit = observed.get("limit")
    if limit:
        resets = parse_time(limit.get("resets_at"))
        if resets is not None and resets > now:
            return True, resets
        if resets is None:
            seen = parse_time(limit.get("at"))
            # No reset time told: assume the shortest window (five hours) still holds it.
            if seen is not None and (now - seen).total_seconds() < 5 * 3600:
                return True, None
    blocking = [
        w
        for w in windows
        if (w.status == "rejected" or (w.used_percent or 0) >= 100)
        and (w.resets_at is None or w.resets_at > now)
    ]
    if blocking:
        resets = [w.resets_at for w in blocking if w.resets_at]
        return True, max(resets) if resets else None
    known = bool(windows) or bool(limit)
    return (False if known else None), None


def account_statuses(executors: list[Executor], book: LimitBook | None) -> list[AccountStatus]:
    """executor_accounts' data: every account of every given executor, in config order."""
    statuses = []
    for executor in executors:
        for account in executor.accounts():
            observed = book.observed(account.target) if book is not None else {}
            statuses.append(executor.account_status(account, observed))
    return statuses


def describe(status: AccountStatus) -> str:
    """One account as executor_accounts prints it."""

    def when(moment: datetime | None) -> str:
        return moment.isoformat(timespec="minutes") if moment else "unknown"

    def yes_no(value: bool | None) -> str:
        return "unknown" if value is None else ("yes" if value else "no")

    lines = [f"{status.target}{' (main)' if status.main else ''}"]
    lines.append(f"  logged in as: {status.logged_in_as}; plan: {status.plan}")
    if status.windows:
        for window in status.windows:
            used = "unknown" if window.used_percent is None else f"{window.used_percent:.0f}%"
            lines.append(
                f"  {window.name}: {used} used, {window.status}, resets {when(window.resets_at)}"
            )
    else:
        lines.append("  usage per window: unknown")
    at_limit = yes_no(status.at_limit)
    if status.at_limit:
        at_limit += f" (until {when(status.at_limit_until)})"
    lines.append(f"  at its limit: {at_limit}; bills past it: {yes_no(status.extra_usage)}")
    lines.append(f"  folders: {', '.join(status.folders) or 'none'}")
    lines += [f"  note: {note}" for note in status.notes]
    return "\n".join(lines)
