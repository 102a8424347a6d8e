"""The one channel between the home's process and a worker process: a Unix socket pair.

Frames are a 4-byte big-endian length, then a pickle of a tuple:
  ("ask", id, op, args)       a request; the other side answers once
  ("answer", id, ok, value)    value is the result, or the error's text when ok is False
  ("tell", 0, op, args)        one way, nothing answers
  ("cancel", id, reason, None) the asker gave up: the handler's task is cancelled with the
                               same reason (an AnsweredElsewhere rides on it, as in-process)

Pickle is safe here because both ends are Atlas processes of one person, and the socket is an
anonymous pair that no other process can open: it is never inherited by a command a bot runs
(see `adopt_fd`). Every feature that moves work between processes names an op here; there are no
other sockets between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from atlas.errors import AtlasError

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[Any]]
_LENGTH = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # a turn's outcome with a long answer fits many times over


class LinkClosed(AtlasError):
    """The other process is gone (it died or is stopping); what was asked has no answer."""


class RemoteError(AtlasError):
    """The other process's handler raised: its type and message, as text."""


class Link:
    """Requests and one-way messages over one stream, both ways at once."""

    def __init__(self, name: str, *, on_lost: Callable[[], None] | None = None) -> None:
        """`on_lost` runs when the other process is found gone (its end closed, or a write to
        it failed, not this side's own close), before any waiter or sender learns it."""
        self.name = name
        self._on_lost = on_lost
        self._handlers: dict[str, Handler] = {}
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._handling: dict[int, asyncio.Task[None]] = {}  # asks being answered, by id
        self.closed = asyncio.Event()

    def on(self, op: str, handler: Handler) -> None:
        self._handlers[op] = handler

    async def open(self, sock: socket.socket) -> None:
        reader, self._writer = await asyncio.open_unix_connection(sock=sock)
        self._reader_task = asyncio.create_task(self._read(reader), name=f"link {self.name}")

    async def ask(self, op: str, *args: Any) -> Any:
        """Send a request and wait for its answer. Raises LinkClosed if the other side goes
        away first, RemoteError if its handler failed."""
        if self.closed.is_set():
            raise LinkClosed(f"{self.name} is not running")
        request_id = next(self._ids)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            await self._send(("ask", request_id, op, args))
            return await answer
        except asyncio.CancelledError as cancel:
            # The other side stops too: a channel's question there is closed, not left open.
            self._cancel_there(request_id, cancel.args[0] if cancel.args else None)
            raise
        finally:
            self._waiting.pop(request_id, None)

    async def tell(self, op: str, *args: Any) -> None:
        await self._send(("tell", 0, op, args))

    def tell_soon(self, op: str, *args: Any) -> None:
        """`tell` from code that cannot wait (a listener, a callback): sent in the order asked
        (each task writes its frame in its first step), nothing once the link is closed."""
        if self.closed.is_set():
            return
        task = asyncio.ensure_future(self._tell_quietly(op, args))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _tell_quietly(self, op: str, args: tuple[Any, ...]) -> None:
        with contextlib.suppress(LinkClosed):
            await self.tell(op, *args)

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._fail_waiting()

    async def _send(self, frame: tuple[Any, ...]) -> None:
        if self._writer is None or self.closed.is_set():
            raise LinkClosed(f"{self.name} is not running")
        data = _framed(frame)
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._lost()
            self._fail_waiting()
            raise LinkClosed(f"{self.name}: {exc}") from exc

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(_LENGTH.size)
                (length,) = _LENGTH.unpack(head)
                if length > MAX_FRAME:
                    log.error("%s: a frame of %d bytes; closing the link", self.name, length)
                    return
                kind, request_id, first, rest = pickle.loads(await reader.readexactly(length))
                if kind == "answer":
                    self._settle(request_id, first, rest)
                elif kind == "cancel":
                    handling = self._handling.get(request_id)
                    if handling is not None:
                        handling.cancel(first)
                else:
                    self._start(kind, request_id, first, rest)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            self._lost()  # the other process ended: waiters learn it below
        finally:
            self._fail_waiting()

    def _settle(self, request_id: int, ok: bool, value: Any) -> None:
        waiter = self._waiting.get(request_id)
        if waiter is None or waiter.done():
            return
        if ok:
            waiter.set_result(value)
        else:
            waiter.set_exception(RemoteError(value))

    def _start(self, kind: str, request_id: int, op: str, args: tuple[Any, ...]) -> None:
        task = asyncio.create_task(self._handle(kind, request_id, op, args), name=f"{op}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        if kind == "ask":
            self._handling[request_id] = task
            task.add_done_callback(lambda _task: self._handling.pop(request_id, None))

    async def _handle(self, kind: str, request_id: int, op: str, args: tuple[Any, ...]) -> None:
        handler = self._handlers.get(op)
        try:
            if handler is None:
                raise AtlasError(f"{self.name}: no handler for {op!r}")
            result, ok = await handler(*args), True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if kind == "tell":
                log.exception("%s: %s failed", self.name, op)
                return
            if isinstance(exc, AtlasError):  # an expected refusal: its words say it all
                result, ok = str(exc), False
            else:
                log.exception("%s: %s failed", self.name, op)
                result, ok = f"{type(exc).__name__}: {exc}", False
        if kind == "ask":
            with contextlib.suppress(LinkClosed):
                try:
                    await self._send(("answer", request_id, ok, result))
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    why = f"{op}: its result cannot be sent to another process ({exc})"
                    await self._send(("answer", request_id, False, why))

    def _cancel_there(self, request_id: int, reason: object) -> None:
        """Send "cancel" without waiting (the caller is being cancelled); a reason that cannot
        cross goes as a plain cancel."""
        if self._writer is None or self.closed.is_set():
            return
        try:
            data = _framed(("cancel", request_id, reason, None))
        except (pickle.PicklingError, TypeError, AttributeError):
            data = _framed(("cancel", request_id, None, None))
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.write(data)

    def _lost(self) -> None:
        if self._on_lost is not None and not self.closed.is_set():
            self._on_lost()

    def _fail_waiting(self) -> None:
        self.closed.set()
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(LinkClosed(f"{self.name} stopped before answering"))


def _framed(frame: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(home's end, worker's end). Both are not inheritable: the worker's end is handed to the
    worker process alone (pass_fds)."""
    home_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return home_end, worker_end


def adopt_fd(fd: int) -> socket.socket:
    """The worker's end, in the worker. pass_fds made it inheritable; made private again at
    once, so that no command a bot runs (sandboxed or not) holds a line to the home's process."""
    os.set_inheritable(fd, False)
    return socket.socket(fileno=fd)
