"""One reader of the terminal for `atlas chat`: every line typed goes to whoever waits for it.

The idle prompt, a question (an approval, ask_user's questions, an executor's question or
permission request, which can come while the prompt waits) and the stop command all want the
next line. Two readers of one stream fail (`readuntil() called while another coroutine is
already waiting`), and a line read by the wrong one goes to the wrong place (an answer sent
to the model as a message). So one task reads stdin for the whole chat and routes each line:

- a command registered with `intercept` (`/stop`) is acted on at once when its handler says
  it applied (a reply was running), even while a reply streams;
- else a waiting question takes it before the idle prompt does;
- else the idle prompt takes it; a line typed while nobody waits is kept, in order, for the
  next one who asks (type-ahead, and piped input read ahead).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Typed:
    """A line as typed (its newline kept), and whether it was typed before anyone asked."""

    text: str
    ahead: bool = False


class ConsoleInput:
    """The single reader of a terminal (or a pipe) and the lines it has not handed out yet."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._kept: deque[str] = deque()  # read, nobody waiting for it yet
        self._questions: deque[asyncio.Future[str | None]] = deque()
        self._prompts: deque[asyncio.Future[str | None]] = deque()
        self._commands: dict[str, Callable[[], bool]] = {}
        self._ended = False
        self._task: asyncio.Task[None] | None = None

    def intercept(self, command: str, handler: Callable[[], bool]) -> None:
        """Act on `command` the moment it is typed; when `handler` returns False (nothing to
        act on), the line is handed out like any other."""
        self._commands[command] = handler

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._read_all(), name="console-input")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._end()

    @property
    def prompt_waiting(self) -> bool:
        """True while the idle prompt waits for a line (its `you> ` is on the screen)."""
        return any(not waiter.done() for waiter in self._prompts)

    async def prompt_line(self) -> Typed | None:
        """The next line for the idle prompt; None at the end of input."""
        if self._kept:
            return Typed(self._kept.popleft(), ahead=True)
        text = await self._wait(self._prompts)
        return None if text is None else Typed(text)

    async def answer_line(self) -> str | None:
        """The next line for a question, ahead of the idle prompt; None at the end of input."""
        if self._kept:
            return self._kept.popleft()
        return await self._wait(self._questions)

    async def _wait(self, waiters: deque[asyncio.Future[str | None]]) -> str | None:
        if self._ended:
            return None
        self.start()
        waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            # Cancelled after the line was handed over (a question answered on the dashboard
            # at that moment): the line goes back for the next one, not lost.
            if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                self._kept.appendleft(waiter.result())  # type: ignore[arg-type]
            raise
        finally:
            if waiter in waiters:
                waiters.remove(waiter)

    async def _read_all(self) -> None:
        try:
            while True:
                try:
                    raw = await self._reader.readline()
                except ValueError:  # longer than the reader's limit: it was dropped
                    log.warning("a typed line longer than the terminal reader's limit was dropped")
                    continue
                if not raw:
                    break
                self._route(raw.decode(errors="replace"))
        finally:
            self._end()

    def _route(self, text: str) -> None:
        handler = self._commands.get(text.strip())
        if handler is not None and handler():
            return
        for waiters in (self._questions, self._prompts):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(text)
                    return
        self._kept.append(text)

    def _end(self) -> None:
        """End of input: everyone waiting, and everyone who asks later, gets None."""
        self._ended = True
        for waiters in (self._questions, self._prompts):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
