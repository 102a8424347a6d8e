"""The executors of a home: the classes registered under the `atlas.executors` entry points
(the built-in ones included, pyproject.toml), made from config.toml's `[executors.<name>]`.

    executors = ExecutorSet.for_home(home, ask=asker)
    executor, account = executors.resolve("claude-code@work", folder)
    instance = await executor.start(TaskSpec(folder, prompt, account))
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.executors.accounts import account_statuses, parse_target
from atlas.executors.base import AccountStatus, Executor, ExecutorError
from atlas.executors.launch import ExecutorLauncher
from atlas.executors.limits import LimitBook
from atlas.plugins import EXECUTORS_GROUP, load_plugins, why_unavailable

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.sandbox.proxy import DomainAsker


@functools.cache
def executor_classes() -> dict[str, type[Executor]]:
    """Every installed executor class by name (entry points; loaded once per process)."""
    found = load_plugins(EXECUTORS_GROUP)
    return {
        name: plugin.target
        for name, plugin in found.items()
        if isinstance(plugin.target, type) and issubclass(plugin.target, Executor)
    }


class ExecutorSet:
    """The home's executors that config.toml turns on (and knows how to make)."""

    def __init__(
        self,
        home: Home,
        *,
        ask: DomainAsker | None = None,
        classes: dict[str, type[Executor]] | None = None,
    ) -> None:
        self.home = home
        self.classes = executor_classes() if classes is None else classes
        self.book = LimitBook.for_home(home.root)
        configured = home.settings.executors
        every_dir = [
            Path(folder).expanduser()
            for settings in configured.values()
            for folder in settings.accounts.values()
        ]
        # Each run sees its own account's folder only: the others stay hidden.
        defaults = [
            Path(cls.default_config_dir).expanduser()
            for name, cls in self.classes.items()
            if name in configured and not configured[name].accounts
        ]
        self.launcher = ExecutorLauncher(home, ask=ask, hidden_config_dirs=[*every_dir, *defaults])
        self.executors: dict[str, Executor] = {
            name: self.classes[name](settings, self.launcher, self.book)
            for name, settings in configured.items()
            if settings.enabled and name in self.classes
        }

    @classmethod
    def for_home(cls, home: Home, *, ask: DomainAsker | None = None) -> ExecutorSet:
        return cls(home, ask=ask)

    def __bool__(self) -> bool:
        return bool(self.executors)

    def names(self) -> list[str]:
        return list(self.executors)

    def get(self, name: str) -> Executor:
        executor = self.executors.get(name)
        if executor is not None:
            return executor
        if name in self.home.settings.executors and name in self.classes:
            why = f"it is turned off: set enabled = true under [executors.{name}] in config.toml"
        elif name in self.home.settings.executors:
            why = why_unavailable(EXECUTORS_GROUP, name)
        else:
            why = f"config.toml has no [executors.{name}] table"
        known = ", ".join(self.executors) or "none"
        raise ExecutorError(f"no executor {name!r}: {why} (turned on: {known})")

    def resolve(self, target: str, folder: Path | None = None):  # type: ignore[no-untyped-def]
        """`claude-code@work` -> (executor, its `work` account); `codex` -> (executor, the
        folder's account, else its main one)."""
        name, nickname = parse_target(target)
        executor = self.get(name)
        return executor, executor.account(nickname, folder)

    def targets(self) -> list[str]:
        """Every target name: `claude-code@main`, `claude-code@work`, `codex@main`..."""
        return [a.target for e in self.executors.values() for a in e.accounts()]

    def statuses(self, executor: str | None = None) -> list[AccountStatus]:
        """executor_accounts' data (no model call), for one executor or all."""
        chosen = [self.get(executor)] if executor else list(self.executors.values())
        return account_statuses(chosen, self.book)
