"""run_command: bash in the bot's workspace, in the foreground or as a background job.

Every command runs in the bot's sandbox (atlas/sandbox/), in its own process group: a timeout, a
cancelled turn or `stop` kills bwrap, and the end of the sandbox's pid namespace ends everything
the command started, even what left the process group (setsid, nohup, a double fork).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from atlas.errors import ToolError
from atlas.sandbox import budget
from atlas.sandbox.commands import Launch, launch, with_hint
from atlas.tools.command_wait import check_loop, timeout_seconds
from atlas.tools.jobs import (
    NOTIFY_TAIL_LINES,
    Job,
    end_lifeline,
    jobs_for,
    kill_tree,
    signal_group,
    spawn,
    tail,
)
from atlas.tools.registry import Notifier, RunContext, Tool, ToolResult, tool
from atlas.trust.read_taint import remember_command_output

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120
MAX_TIMEOUT = 600
OUTPUT_CAP = 5_000_000  # bytes kept from a foreground command; the rest is counted, not stored
DRAIN_SECONDS = 1.0  # after the shell exits, how long to wait for output still in the pipe


class _OutputSink(asyncio.Protocol):
    """Keeps the first `cap` bytes read from a pipe, counts the rest, and says when it closes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = max(self.cap - len(self.kept), 0)
        self.kept += data[:room]
        self.dropped += max(len(data) - room, 0)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    async def settle(self, seconds: float) -> bool:
        """Wait up to `seconds` for the pipe to close; False if a process still holds it."""
        try:
            async with asyncio.timeout(seconds):
                await asyncio.shield(self.closed)
        except TimeoutError:
            return False
        return True

    def text(self) -> str:
        out = self.kept.decode("utf-8", errors="replace").rstrip("\n")
        if self.dropped:
            out += f"\n[output capped: first {len(self.kept):,} bytes kept, {self.dropped:,} more dropped]"
        return out or "(no output)"


def _open_pipe() -> tuple[BinaryIO, int]:
    read_fd, write_fd = os.pipe()
    # Not a context manager: the read end belongs to the transport, which closes it.
    return open(read_fd, "rb", buffering=0), write_fd


async def _run_foreground(launch: Launch, time_limit: int) -> str:
    loop = asyncio.get_running_loop()
    reader, write_fd = _open_pipe()
    try:
        process = await spawn(launch, stdout=write_fd)
    except BaseException:
        reader.close()
        raise
    finally:
        os.close(write_fd)  # the command holds its own copy; ours would keep the pipe open forever
    transport, sink = await loop.connect_read_pipe(lambda: _OutputSink(OUTPUT_CAP), reader)
    try:
        try:
            async with asyncio.timeout(time_limit):
                await process.wait()
        except TimeoutError:
            await kill_tree(process)
            await sink.settle(DRAIN_SECONDS)
            return f"{sink.text()}\n[killed after timeout {time_limit}s]"
        released = await sink.settle(DRAIN_SECONDS)
        note = (
            ""
            if released
            else "\n[a process it started in the background still holds the output; it keeps "
            "running but its further output is lost: use background=true for servers]"
        )
        return f"{sink.text()}{note}\n[exit code {process.returncode}]"
    except asyncio.CancelledError:
        await kill_tree(process)  # the turn was cancelled: nothing it started may outlive it
        raise
    finally:
        transport.close()
        end_lifeline(process)
        if process.returncode is None:  # cancelled again while killing: no grace this time
            signal_group(process.pid, signal.SIGKILL)


def _resolve_cwd(run: RunContext, cwd: str | None) -> Path:
    workspace = run.bot.workspace
    if cwd is None:
        workspace.mkdir(parents=True, exist_ok=True)
        return workspace
    path = Path(cwd).expanduser()
    path = path if path.is_absolute() else workspace / path
    if not path.is_dir():
        problem = "is not a directory" if path.exists() else "does not exist"
        raise ToolError(f"cwd {path} {problem} (relative paths start at the workspace {workspace})")
    return path


async def _stop_job(run: RunContext, job_id: str) -> str:
    table = jobs_for(run.home)
    job = table.get(job_id)
    if job is None or job.bot != run.bot.name:
        ids = ", ".join(j.id for j in table.running(run.bot.name)) or "none"
        raise ToolError(f"no background job {job_id!r} (running jobs: {ids})")
    was_running = job.running
    await table.stop(job_id)
    state = "stopped" if was_running else "had already ended"
    return (
        f"Job {job.id} {state}: {job.outcome}\n"
        f"Last lines of {job.log_path}:\n{tail(job.log_path, NOTIFY_TAIL_LINES, 1)}"
    )


async def _start_job(
    run: RunContext,
    command: str,
    workdir: Path,
    sandbox: bool,
    time_limit: int | None,
    notify: Notifier | None,
    **about: Any,
) -> Job:
    """A background job, its sandbox's proxy channel held open until the job ends. `about`:
    JobTable.start's description, check and watched."""
    async with contextlib.AsyncExitStack() as stack:
        how = await stack.enter_async_context(launch(run, command, workdir, sandbox=sandbox))
        job = await jobs_for(run.home).start(
            how,
            run.home.jobs_dir,
            bot=run.bot.name,
            time_limit=time_limit,
            notify=notify,
            cleanup=stack.pop_all(),
            **about,
        )
    return job


async def _start_wait(
    run: RunContext,
    until: str,
    interval: int,
    workdir: Path,
    time_limit: int,
    description: str | None,
    beside: Job | None,
) -> ToolResult:
    """`until`: the check's loop as a background job that always tells how it ended. A run
    no notice can reach (a routine run) waits for it here instead: a check that never passed
    is then a failure the loop guards see."""
    job = await _start_job(
        run,
        check_loop(until, interval),
        workdir,
        True,  # the check always runs in the sandbox, even beside a command let out of it
        time_limit,
        run.notify,
        description=description,
        check=until,
        watched=beside,
    )
    if run.notify is None:
        assert job.task is not None
        try:
            await asyncio.shield(job.task)
        except asyncio.CancelledError:  # the turn was stopped: so is its wait
            await jobs_for(run.home).stop(job.id)
            raise
        text = f"Wait {job.id}: {job.outcome}\n{tail(job.log_path, NOTIFY_TAIL_LINES, 1)}"
        return ToolResult(text, failed=not (job.outcome or "").startswith("[check passed"))
    return ToolResult(
        f"Waiting (job {job.id}): `{until}` runs every {interval}s for up to {time_limit}s. "
        f"A notice will tell you when it passes or the time is up; its log is {job.log_path}. "
        f'Stop it with stop="{job.id}".'
    )


_EXIT_LINE = re.compile(r"^\[(?:exit code (-?\d+)|killed after timeout \d+s)\]$", re.MULTILINE)


def exit_status(output: str) -> int | None:
    """A foreground command's exit code from its output's last end line; None when it was
    killed after its timeout or the output has no end line."""
    ends = _EXIT_LINE.findall(output)
    return int(ends[-1]) if ends and ends[-1] != "" else None


def _command_failed(output: str) -> bool:
    """A foreground command that exited non-zero or was killed: its last such line says."""
    ends = _EXIT_LINE.findall(output)
    return bool(ends) and ends[-1] != "0"


@tool(failure_tolerant=True)  # retrying a command another way is diagnosis (loop guards)
async def run_command(
    run: RunContext,
    command: str | None = None,
    cwd: Annotated[str | None, Field(description="Default: the workspace; relative to it")] = None,
    timeout: Annotated[
        int | None,
        Field(description="Seconds, 1-600; default 120, none in background, 600 with until"),
    ] = None,
    background: bool = False,
    notify_on_complete: Annotated[
        bool, Field(description="Background only: tell this chat when it ends")
    ] = False,
    stop: Annotated[str | None, Field(description="Job id to stop (no command)")] = None,
    until: Annotated[
        str | None,
        Field(
            description="Check command run every interval, in background, until it exits 0 "
            "or timeout; a notice tells you. A command given starts in background"
        ),
    ] = None,
    interval: Annotated[int, Field(ge=1, le=300, description="Seconds between checks")] = 5,
    sandbox: Annotated[
        bool,
        Field(
            description="Set false only to retry a command that failed because of the sandbox; "
            "the person is asked every time"
        ),
    ] = True,
    # Claude Code's Bash names, accepted and not advertised: they mark its shape, where
    # `timeout` is in milliseconds (command_wait.timeout_seconds).
    description: SkipJsonSchema[str | None] = None,
    run_in_background: SkipJsonSchema[bool | None] = None,
) -> str | ToolResult:
    """Run a bash command; returns its output (stdout+stderr) and exit code.

    Runs in a sandbox: only the workspace is writable, network only via a proxy.
    No stdin or terminal: use non-interactive flags. Timeout kills the command and its children.
    For servers and long jobs use background=true: returns at once with a job id and a log file
    (read_file it; its last line tells how the job ended).
    """
    if stop is not None:
        if command is not None or until is not None:
            raise ToolError("give either command/until or stop, not both")
        return await _stop_job(run, stop)
    if until is not None and not until.strip():
        raise ToolError("until is empty: give the check command to poll")
    if until is None and (not command or not command.strip()):
        raise ToolError("give a command to run (or until=<check>, or stop=<job id>)")
    claude_shape = description is not None or run_in_background is not None
    seconds = timeout_seconds(timeout, claude_shape=claude_shape, maximum=MAX_TIMEOUT)
    background = background or bool(run_in_background) or until is not None
    if notify_on_complete and not background:
        raise ToolError("notify_on_complete needs background=true")
    workdir = _resolve_cwd(run, cwd)
    if not background:
        async with launch(run, command or "", workdir, sandbox=sandbox) as how:
            output = with_hint(await _run_foreground(how, seconds or DEFAULT_TIMEOUT), how)
        await remember_command_output(run, command or "", workdir, output)  # what it read outside
        output += await asyncio.to_thread(budget.note_after_command, run)
        return ToolResult(output, failed=_command_failed(output))
    notify = run.notify if notify_on_complete else None
    job = None
    if command:  # beside a wait, the command has no time limit: `timeout` is the wait's
        limit = None if until is not None else seconds
        job = await _start_job(
            run, command, workdir, sandbox, limit, notify, description=description
        )
    started = _started(job, workdir, notify_on_complete, notify) if job else ""
    if until is None:
        return started
    waiting = await _start_wait(
        run, until, interval, workdir, seconds or MAX_TIMEOUT, description, job
    )
    if started:
        waiting.text = f"{started}\n{waiting.text}"
    return waiting


def _started(job: Job, workdir: Path, notify_on_complete: bool, notify: Notifier | None) -> str:
    notice = ""
    if notify_on_complete:
        notice = (
            " You will be told when it ends."
            if notify
            else " (No notice can reach this run: check the log.)"
        )
    label = f" ({job.description})" if job.description else ""
    return (
        f"Started background job {job.id}{label} (pid {job.process.pid}) in {workdir}.\n"
        f"Output: {job.log_path}; its last line will say how the job ended.{notice}\n"
        f'Stop it with stop="{job.id}".'
    )


SHELL_TOOLS: list[Tool] = [run_command]
