"""What the Telegram and Slack channels share: `/new` generations of a chat, the check of files
going out, and the background work (closing a question's message) a channel keeps until it
stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import sqlite_utils  # loaded through atlas.store, which keeps pandas out


from atlas.store.home_db import HomeStore

log = logging.getLogger(__name__)
MB = 1024 * 1024
NEW_CONVERSATION = "Started a new conversation. The earlier one is kept and searchable."


@runtime_checkable
class GenerationRows(Protocol):
    """Where `/new` generations are kept: atlas.db (`SqliteGenerations`), or the home's
    PostgreSQL database (atlas/store/pg/generations.py)."""

    async def generation(self, channel: str, chat: str, thread: str, user: str) -> int: ...

    async def set_generation(
        self, channel: str, chat: str, thread: str, user: str, generation: int
    ) -> None: ...


class SqliteGenerations:
    """The generations in atlas.db's `chat_generations` (a HomeStore, or a worker's remote one)."""

    def __init__(self, store: HomeStore) -> None:
        self.store = store

    async def generation(self, channel: str, chat: str, thread: str, user: str) -> int:
        def find(db: sqlite_utils.Database) -> int:  # may run in another process: no `self`
            rows = db.query(
                "SELECT generation FROM chat_generations "
                "WHERE channel = ? AND chat = ? AND thread = ? AND user = ?",
                [channel, chat, thread, user],
            )
            row = next(iter(rows), None)
            return int(row["generation"]) if row else 0

        return await self.store.quick(find)

    async def set_generation(
        self, channel: str, chat: str, thread: str, user: str, generation: int
    ) -> None:
        row: dict[str, Any] = {
            "channel": channel,
            "chat": chat,
            "thread": thread,
            "user": user,
            "generation": generation,
        }
        pk = ("channel", "chat", "thread", "user")
        await self.store.quick(lambda db: db["chat_generations"].upsert(row, pk=pk))


class ChatGenerations:
    """How often `/new` restarted each conversation of one channel, kept in the home's store
    (atlas.db, or PostgreSQL) so the chat key `<chat>#<generation>` survives a restart (and the
    old conversation stays stored)."""

    def __init__(self, store: HomeStore | GenerationRows, channel: str) -> None:
        self.rows: GenerationRows = (
            store if isinstance(store, GenerationRows) else SqliteGenerations(store)
        )
        self.channel = channel
        self._known: dict[tuple[str, str, str], int] = {}

    async def current(self, chat: str, thread: str = "", user: str = "") -> int:
        key = (chat, thread, user)
        if key not in self._known:
            self._known[key] = await self.rows.generation(self.channel, chat, thread, user)
        return self._known[key]

    async def chat_key(self, chat: str, thread: str = "", user: str = "") -> str:
        """The conversation's chat key: the platform's chat id, with its generation if any."""
        generation = await self.current(chat, thread, user)
        return f"{chat}#{generation}" if generation else chat

    async def bump(self, chat: str, thread: str = "", user: str = "") -> int:
        """Start the next generation: the next message here begins a fresh conversation."""
        generation = await self.current(chat, thread, user) + 1
        await self.rows.set_generation(self.channel, chat, thread, user, generation)
        self._known[(chat, thread, user)] = generation
        return generation


def platform_chat(chat_key: str) -> str:
    """The platform's own chat id in a chat key (without the `/new` generation)."""
    return chat_key.split("#", 1)[0]


def unsendable(path: Path, limit: int, platform: str) -> str | None:
    """Why a file cannot go out (missing, not a file, over `limit` bytes), or None."""
    try:
        info = path.stat()
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not path.is_file():
        return "it is not a file"
    if info.st_size > limit:
        size, most = info.st_size / MB, limit / MB
        return f"it is {size:.1f} MB and {platform} takes at most {most:.0f} MB from a bot"
    return None


def sort_files(
    files: list[Path], problem: Callable[[Path], str | None], channel: str
) -> tuple[list[Path], list[str]]:
    """The files that can go out, and a line for each that cannot, saying why."""
    sendable: list[Path] = []
    refused: list[str] = []
    for path in files:
        why = problem(path)
        if why is None:
            sendable.append(path)
        else:
            log.warning("%s: file %s not sent: %s", channel, path, why)
            refused.append(f"(I could not send the file {path.name}: {why}.)")
    return sendable, refused


async def sort_attached(
    files: list[Path] | None, problem: Callable[[Path], str | None], channel: str
) -> tuple[list[Path], list[str]]:
    """`sort_files` off the loop (it reads the disk); a reply without files, the usual case,
    skips the thread, whose hand-off costs a busy daemon milliseconds of waiting for the GIL."""
    if not files:
        return [], []
    return await asyncio.to_thread(sort_files, files, problem, channel)


class BackgroundTasks:
    """Work that outlives the call that began it, cancelled when the channel stops. Work that
    fails is logged with its traceback (asyncio would only say so when the task is collected)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("background task %s failed", task.get_name(), exc_info=error)

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = [
    "NEW_CONVERSATION",
    "BackgroundTasks",
    "ChatGenerations",
    "GenerationRows",
    "SqliteGenerations",
    "platform_chat",
    "sort_files",
    "unsendable",
]
