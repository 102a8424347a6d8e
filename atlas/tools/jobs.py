"""Background jobs: a command detached from the turn, its output in `<home>/commands/<id>.log`, its
end written as the log's last line and told in a notice that wakes the conversation. A wait
(run_command's `until`) is such a job too (atlas/tools/command_wait.py).

Also how a command's process is started and killed: in its own process group, so a timeout, a
cancelled turn or `stop` reaches everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.tools.command_wait import GRACE_AFTER_COMMAND, end_notice, wait_outcome

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.sandbox.commands import Launch
    from atlas.tools.registry import Notifier

log = logging.getLogger(__name__)

KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
NOTIFY_TAIL_LINES = 20


# A sandboxed command's lifeline: the write end of the pipe that is its stdin (launcher.INIT).
# Closing it ends the whole sandbox; so does this process's death, however it dies.
_lifelines: weakref.WeakKeyDictionary[asyncio.subprocess.Process, int] = weakref.WeakKeyDictionary()


async def spawn(launch: Launch, stdout: int) -> asyncio.subprocess.Process:
    stdin: int = asyncio.subprocess.DEVNULL
    lifeline = None
    if launch.sandboxed:
        stdin, lifeline = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            stdin=stdin,
            stdout=stdout,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: killpg reaches every descendant
        )
    except BaseException:
        if lifeline is not None:
            os.close(lifeline)
        raise
    finally:
        if lifeline is not None:
            os.close(stdin)  # the sandbox holds its own copy
    if lifeline is not None:
        _lifelines[process] = lifeline
        weakref.finalize(process, _close_fd, lifeline)
    return process


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):  # closed already by end_lifeline
        os.close(fd)


def end_lifeline(process: asyncio.subprocess.Process) -> None:
    """Close a sandboxed command's lifeline: everything in its sandbox is killed (or, once it
    has ended, nothing more is held open)."""
    fd = _lifelines.pop(process, None)
    if fd is not None:
        os.close(fd)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone, which is what we wanted
        os.killpg(pgid, sig)


def _kill_children(pid: int) -> None:
    """SIGKILL the children of bwrap's outer process: the sandbox's pid 1, which a SIGTERM from
    outside cannot reach, and which bwrap may leave stuck if it dies while starting."""
    try:  # the process may exit meanwhile: its /proc folder goes, and with it its children
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:
        return
    for task in tasks:
        with contextlib.suppress(OSError):
            for child in task.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(child), signal.SIGKILL)


async def kill_tree(process: asyncio.subprocess.Process) -> None:
    """End the sandbox (lifeline, its pid 1), SIGTERM the command's process group, SIGKILL it
    after a grace period; reap the shell."""
    if process in _lifelines:
        end_lifeline(process)
        _kill_children(process.pid)
    signal_group(process.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(KILL_GRACE):
            await process.wait()
    except TimeoutError:
        pass  # the grace is over; SIGKILL below cannot be ignored
    # Unconditional: descendants that ignored SIGTERM may outlive the shell.
    signal_group(process.pid, signal.SIGKILL)
    await process.wait()


@dataclass
class Job:
    """A background command: its process, where its output goes, and how it ended."""

    id: str
    bot: str
    command: str
    log_path: Path
    process: asyncio.subprocess.Process
    timeout: int | None
    notify: Notifier | None
    started: float = field(default_factory=time.monotonic)
    outcome: str | None = None  # the log's final line, once the job has ended
    stop_requested: bool = False
    task: asyncio.Task[None] | None = None
    cleanup: contextlib.AsyncExitStack | None = None  # closed when the job ends (its proxy channel)
    description: str | None = None  # Claude Code's Bash `description`: shown with the job
    check: str | None = None  # a wait (`until`): the check its loop polls (command_wait.py)
    watched: Job | None = None  # a wait's command, started with it: its end ends the wait
    gave_up: str | None = None  # why a wait stopped before its check passed

    @property
    def running(self) -> bool:
        return self.outcome is None


def _append_final_line(path: Path, line: str) -> None:
    with path.open("ab+") as log_file:
        log_file.seek(0, os.SEEK_END)
        needs_newline = False
        if log_file.tell():
            log_file.seek(-1, os.SEEK_END)
            needs_newline = log_file.read(1) != b"\n"
        log_file.write(("\n" if needs_newline else "").encode() + line.encode() + b"\n")


def _new_log(jobs_dir: Path) -> tuple[str, Path]:
    jobs_dir.mkdir(parents=True, exist_ok=True)
    job_id = secrets.token_hex(4)
    return job_id, jobs_dir / f"{job_id}.log"


def tail(path: Path, lines: int, skip_last: int = 0) -> str:
    """The last `lines` lines of a log (before its last `skip_last` lines), read from its end."""
    with path.open("rb") as log_file:
        log_file.seek(0, os.SEEK_END)
        log_file.seek(max(log_file.tell() - 64_000, 0))
        text = log_file.read().decode("utf-8", errors="replace")
    all_lines = text.rstrip("\n").splitlines()
    if skip_last:
        all_lines = all_lines[:-skip_last]
    return "\n".join(all_lines[-lines:]) or "(no output)"


class JobTable:
    """The background jobs of one home, so `stop` can find them and shutdown can end them."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def running(self, bot: str | None = None) -> list[Job]:
        return [j for j in self._jobs.values() if j.running and bot in (None, j.bot)]

    async def start(
        self,
        launch: Launch,
        jobs_dir: Path,
        *,
        bot: str,
        time_limit: int | None = None,
        notify: Notifier | None = None,
        cleanup: contextlib.AsyncExitStack | None = None,
        description: str | None = None,
        check: str | None = None,
        watched: Job | None = None,
    ) -> Job:
        """Start a command detached from the turn, its output going to `jobs_dir/<id>.log`;
        `cleanup` is closed when it ends. With `check`, the launch is that check's loop (a
        wait), which ends early when the `watched` job ends first and the check still fails."""
        job_id, log_path = _new_log(jobs_dir)
        with log_path.open("wb") as log_file:
            process = await spawn(launch, stdout=log_file.fileno())
        job = Job(job_id, bot, check or launch.command, log_path, process, time_limit, notify)
        job.cleanup, job.description, job.check, job.watched = cleanup, description, check, watched
        job.task = asyncio.create_task(self._supervise(job), name=f"job {job_id}")
        self._jobs[job_id] = job
        return job

    async def stop(self, job_id: str) -> Job:
        """Kill a job's process tree and wait until its log says it ended."""
        job = self._jobs[job_id]
        if job.running:
            job.stop_requested = True
            await kill_tree(job.process)
        assert job.task is not None
        await job.task
        return job

    async def shutdown(self) -> None:
        """Stop every running job and wait for all their supervisors (the daemon is stopping)."""
        await asyncio.gather(*(self.stop(job.id) for job in self.running()))
        await asyncio.gather(*(j.task for j in self._jobs.values() if j.task))

    async def _supervise(self, job: Job) -> None:
        try:
            await self._watch(job)
        finally:
            end_lifeline(job.process)
            if job.cleanup is not None:
                await job.cleanup.aclose()

    async def _watch(self, job: Job) -> None:
        timed_out = False
        try:
            async with asyncio.timeout(job.timeout):
                await self._ended(job)
        except TimeoutError:
            timed_out = True
            await kill_tree(job.process)
        except asyncio.CancelledError:  # the loop is going away without a shutdown: still clean up
            job.stop_requested = True
            await kill_tree(job.process)
            self._finish(job, timed_out=False)
            raise
        self._finish(job, timed_out=timed_out)
        # A stopped job's end is told by `stop` itself (or nobody is left to hear it at shutdown).
        if job.notify and not job.stop_requested:
            text = end_notice(job, tail(job.log_path, NOTIFY_TAIL_LINES, 1))
            try:
                await job.notify(text)
            except Exception:  # a failed notice must not lose the job's record
                log.warning("could not deliver the notice for job %s", job.id, exc_info=True)

    @staticmethod
    async def _ended(job: Job) -> None:
        """Until the job's process exits; a wait also stops soon after the command it waits
        beside has ended, if its check has not passed by then."""
        watched = job.watched
        if watched is None or watched.task is None:
            await job.process.wait()
            return
        exited = asyncio.ensure_future(job.process.wait())
        try:
            await asyncio.wait({exited, watched.task}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():  # the command ended first: one last chance for the check
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(GRACE_AFTER_COMMAND):
                        await asyncio.shield(exited)
            if not exited.done():
                job.gave_up = f"its command (job {watched.id}) ended first: {watched.outcome}"
                await kill_tree(job.process)
        finally:
            exited.cancel()

    @staticmethod
    def _finish(job: Job, *, timed_out: bool) -> None:
        if job.check is not None:
            elapsed = time.monotonic() - job.started
            outcome = wait_outcome(job, timed_out=timed_out, elapsed=elapsed)
        elif job.stop_requested:
            outcome = "[stopped]"
        elif timed_out:
            outcome = f"[killed after timeout {job.timeout}s]"
        else:
            elapsed = time.monotonic() - job.started
            outcome = f"[exit code {job.process.returncode} after {elapsed:.1f}s]"
        _append_final_line(job.log_path, outcome)
        job.outcome = outcome


_tables: dict[Path, JobTable] = {}


def jobs_for(home: Home) -> JobTable:
    """The job table of a home (one per home root)."""
    return _tables.setdefault(home.root, JobTable())
