"""The routine runs a node runs for each bot it holds, stopped when it loses the bot.

Issue #36: only a bot's holder runs its turns and sandboxed commands. A routine's run handed
to the holder (`ROUTINE_RUN`, atlas/cluster/home_node.py) is a task of its own, not a lane of
the dispatcher, so `Dispatcher.forget_bot` does not reach it: the node keeps it here, and
cancels it (its turn, the sandboxed commands it runs) when the bot's lease is lost. The run's
record then says why (`why_stopped`), not that Atlas shut down.
"""

from __future__ import annotations

import asyncio
from typing import Any


class BotTasks:
    """Tasks per bot; `stop(bot, why)` cancels a bot's and waits for them."""

    def __init__(self) -> None:
        self._by_bot: dict[str, set[asyncio.Task[Any]]] = {}
        self._why: dict[asyncio.Task[Any], str] = {}

    def add(self, bot: str, task: asyncio.Task[Any]) -> None:
        tasks = self._by_bot.setdefault(bot, set())
        tasks.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            tasks.discard(finished)
            self._why.pop(finished, None)

        task.add_done_callback(done)

    def of(self, bot: str) -> list[asyncio.Task[Any]]:
        return list(self._by_bot.get(bot, ()))

    def why_stopped(self, task: asyncio.Task[Any] | None) -> str | None:
        """Why `stop` cancelled this task; None when it did not (a shutdown, say)."""
        return self._why.get(task) if task is not None else None

    async def stop(self, bot: str, why: str) -> None:
        tasks = self.of(bot)
        for task in tasks:
            self._why[task] = why
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
