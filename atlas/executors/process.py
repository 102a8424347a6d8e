"""The running harness: one process at a time in the sandbox, its JSONL read line by line.

`HarnessInstance` is what both built-in executors share. A subclass says how to start a run
(`run_argv`), what to write first (`opening`), how to read a line (`parse`) and whether the
harness reads more input while it works (`live_steering`). Steers the harness cannot take in the
running turn are kept, and when the turn ends they continue the same session as a new run
(`--resume` / `exec resume`) within the same instance, so its events go on where they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.base import (
    ExecutorError,
    ExecutorEvent,
    ExecutorInstance,
    Failure,
    LimitReached,
    Result,
    SessionStarted,
    SteerOutcome,
    TaskSpec,
)

if TYPE_CHECKING:
    from atlas.executors.launch import ExecutorLauncher
    from atlas.executors.limits import LimitBook

log = logging.getLogger(__name__)

LINE_LIMIT = 32 * 1024 * 1024  # one JSONL line (a tool's whole output can be in it)
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
STDERR_KEPT = 40  # lines of the harness's stderr kept for an error message


class HarnessInstance(ExecutorInstance):
    live_steering = False  # True: steer() writes into the running turn (stdin)
    close_after_opening = False  # True: the opening is all the input the harness reads

    def __init__(
        self,
        task: TaskSpec,
        *,
        binary: str,
        env: Mapping[str, str],
        hosts: Sequence[str],
        launcher: ExecutorLauncher,
        book: LimitBook | None = None,
        account_paths: Sequence[Path] = (),
    ) -> None:
        super().__init__(task)
        self.account_paths = tuple(account_paths) or (task.account.config_dir,)
        self.binary, self.env, self.hosts = binary, dict(env), tuple(hosts)
        self.launcher, self.book = launcher, book
        self.process: asyncio.subprocess.Process | None = None
        self.stopped = False
        self.ended = False
        self.queued: deque[str] = deque()  # steers for after the current turn
        self.stderr: deque[str] = deque(maxlen=STDERR_KEPT)
        # Steers written into the running turn that the harness has not echoed back yet: if it
        # exits without taking one, it goes on in the next run with the queued ones.
        self.unacknowledged: list[str] = []
        self.last_error: str | None = None  # the harness's last non-fatal error, for a failure
        self._stdin_open = False

    # --- what a harness says ------------------------------------------------------------------

    def run_argv(self, prompt: str, session_id: str | None) -> list[str]:
        raise NotImplementedError

    def opening(self, prompt: str) -> list[bytes] | None:
        """What to write on stdin at the start; None: stdin is closed at once."""
        return None

    def parse(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        raise NotImplementedError

    def turn_ended(self, event: ExecutorEvent) -> bool:
        """Whether this event ends the turn (then a live harness's stdin is closed)."""
        return isinstance(event, Result | LimitReached)

    # --- ExecutorInstance ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return not self.ended

    async def events(self) -> AsyncIterator[ExecutorEvent]:  # type: ignore[override]
        prompt: str | None = self.task.prompt
        try:
            while prompt is not None and not self.stopped:
                ended_badly = False  # at the limit, or failed: queued steers wait for a resume
                async for event in self._run(prompt):
                    ended_badly = ended_badly or isinstance(event, LimitReached | Failure)
                    yield event
                prompt = None
                if self.queued and not ended_badly and not self.stopped and self.session_id:
                    prompt = "\n\n".join(self.queued)
                    self.queued.clear()
        finally:
            self.ended = True
            await self._kill()

    async def steer(self, message: str) -> SteerOutcome:
        if self.ended:
            raise ExecutorError(
                "this instance has ended; resume its session to continue "
                f"(session {self.session_id or 'unknown'})"
            )
        if self.live_steering and self._stdin_open:
            self.unacknowledged.append(message)
            await self.write_lines(self.user_message(message))
            return "sent"
        self.queued.append(message)
        return "queued"

    async def stop(self) -> None:
        self.stopped = True
        await self._kill()

    def acknowledge(self, text: str) -> None:
        """The harness echoed a user message it took (a live steer)."""
        if text in self.unacknowledged:
            self.unacknowledged.remove(text)

    # --- the process --------------------------------------------------------------------------

    def user_message(self, text: str) -> list[bytes]:
        raise NotImplementedError

    async def write_lines(self, lines: Sequence[bytes]) -> None:
        process = self.process
        if process is None or process.stdin is None or not self._stdin_open:
            raise ExecutorError("the harness no longer reads input")
        for line in lines:
            process.stdin.write(line)
        await process.stdin.drain()

    async def write_json(self, payload: Mapping[str, Any]) -> None:
        await self.write_lines([json.dumps(payload).encode() + b"\n"])

    async def _close_stdin(self) -> None:
        process = self.process
        if process is not None and process.stdin is not None and self._stdin_open:
            self._stdin_open = False
            process.stdin.close()
            with contextlib.suppress(ConnectionError, BrokenPipeError):
                await process.stdin.wait_closed()

    async def _run(self, prompt: str) -> AsyncIterator[ExecutorEvent]:
        argv = self.run_argv(prompt, self.session_id)
        async with self.launcher.launch(
            argv,
            folder=self.task.folder,
            account_paths=self.account_paths,
            env=self.env,
            hosts=self.hosts,
            bot=self.task.bot,
            ask=self.task.ask_host,
        ) as launch:
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *launch.argv,
                    cwd=launch.cwd,
                    env=launch.env,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=LINE_LIMIT,
                    start_new_session=True,  # so stop() ends its whole process group
                )
            except OSError as exc:
                raise ExecutorError(f"cannot start {self.binary}: {exc}") from exc
            self._stdin_open = True
            stderr_task = asyncio.create_task(self._drain_stderr(self.process))
            try:
                async for event in self._read(prompt):
                    yield event
            finally:
                await self._kill()
                await asyncio.gather(stderr_task, return_exceptions=True)
                self.queued.extendleft(reversed(self.unacknowledged))
                self.unacknowledged.clear()

    async def _read(self, prompt: str) -> AsyncIterator[ExecutorEvent]:
        process = self.process
        assert process is not None and process.stdout is not None
        opening = self.opening(prompt)
        if opening is not None:
            await self.write_lines(opening)
        if opening is None or self.close_after_opening:
            await self._close_stdin()
        finished = False  # a Result, LimitReached or Failure ended the run's turn
        while True:
            try:
                raw = await process.stdout.readline()
            except ValueError:  # a line past LINE_LIMIT
                yield Failure(f"{self.binary} wrote a line longer than {LINE_LIMIT} bytes")
                return
            if not raw:
                break
            for event in self._decode(raw):
                if isinstance(event, SessionStarted | Result) and event.session_id:
                    self.session_id = event.session_id
                if self.turn_ended(event) or isinstance(event, Failure):
                    finished = True
                    # The end of input: the harness finishes what it took and exits. A steer
                    # from now on waits for the next run (the same session, resumed).
                    await self._close_stdin()
                yield event
        code = await process.wait()
        if self.stopped:
            yield Failure("stopped", exit_code=code)
        elif not finished:
            tail = " | ".join(self.stderr) or "no output on stderr"
            said = f"; its last error: {self.last_error}" if self.last_error else ""
            yield Failure(f"{self.binary} exited with code {code} ({tail}){said}", exit_code=code)

    def _decode(self, raw: bytes) -> list[ExecutorEvent]:
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            return []
        try:
            line = json.loads(text)
        except ValueError:
            log.debug("executor %s: not JSON: %.200s", self.binary, text)
            return []
        if not isinstance(line, dict):
            return []
        try:
            return self.parse(line)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("executor %s: unreadable event %.200s (%r)", self.binary, text, exc)
            return []

    async def _drain_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line:
                self.stderr.append(line[:500])

    async def _kill(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        await self._close_stdin()
        for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)  # bwrap first: the sandbox's processes die with it
            try:
                await asyncio.wait_for(process.wait(), wait)
                return
            except TimeoutError:
                continue
