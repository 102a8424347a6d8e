"""run_command's `until` (a check polled in the background until it passes) and its reading of
Claude Code's Bash arguments (`timeout` in milliseconds).

A wait is a background job like any other (atlas/tools/shell.py's JobTable): its process is a
bash loop, in the sandbox, that runs the check every `interval` seconds and exits 0 once the
check does. So it has a log, an id `stop` takes, a time limit, and the same completion notice
that wakes the conversation; only the words of its end differ.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

from atlas.errors import ToolError

if TYPE_CHECKING:
    from atlas.tools.jobs import Job

CHECK_TAIL_LINES = 5  # lines of each check's output kept in the wait's log
MIN_CHECK_LIMIT = 30  # seconds one check may take (at least; more with a long interval)
GRACE_AFTER_COMMAND = 2  # seconds the check still gets once the command it waits beside ended


def timeout_seconds(timeout: int | None, *, claude_shape: bool, maximum: int) -> int | None:
    """`timeout` in seconds. Claude Code's Bash gives milliseconds (at most 600,000): read it so
    when the call has Claude Code's shape (`description` or `run_in_background`), or when the
    value is 1,000 or more (no seconds value is that large). 601-999 is neither: refused."""
    if timeout is None:
        return None
    out_of_range = (
        f"timeout must be between 1 and {maximum} seconds (got {timeout}; 1000 or more is read "
        "as milliseconds, Claude Code's unit)"
    )
    if timeout < 1:
        raise ToolError(out_of_range)
    if claude_shape or timeout >= 1000:
        if timeout > maximum * 1000:
            raise ToolError(
                f"timeout {timeout} read as milliseconds (Claude Code's unit) is over the "
                f"maximum of {maximum * 1000} ms ({maximum} s)"
            )
        return max(1, math.ceil(timeout / 1000))
    if timeout > maximum:
        raise ToolError(out_of_range)
    return timeout


def check_loop(check: str, interval: int) -> str:
    """The bash loop a wait runs: the check (in its own bash, its output kept short in the
    log) every `interval` seconds, until it exits 0. A check that hangs is cut off."""
    limit = max(MIN_CHECK_LIMIT, interval * 2)
    return (
        "i=0; while :; do i=$((i+1)); "
        f"out=$(timeout -k 2 {limit} bash -c {shlex.quote(check)} 2>&1); code=$?; "
        'printf "[check %d at %ds: exit %d]\\n" "$i" "$SECONDS" "$code"; '
        f'[ -n "$out" ] && printf "%s\\n" "$out" | tail -n {CHECK_TAIL_LINES}; '
        '[ "$code" -eq 0 ] && exit 0; '
        f"sleep {interval}; done"
    )


def wait_outcome(job: Job, *, timed_out: bool, elapsed: float) -> str:
    """The final line of a wait's log: whether the check passed, and if not, why it stopped."""
    if job.stop_requested:
        return "[stopped]"
    if job.gave_up:
        return f"[check not passed: {job.gave_up}]"
    if timed_out:
        return f"[check not passed within the timeout of {job.timeout}s]"
    if job.process.returncode == 0:
        return f"[check passed after {elapsed:.1f}s]"
    return f"[the wait failed: exit code {job.process.returncode} after {elapsed:.1f}s]"


def end_notice(job: Job, tail: str) -> str:
    """The notice a job's end puts into the conversation (a wait's says what it waited for)."""
    label = f" ({job.description})" if job.description else ""
    if job.check is not None:
        beside = ""
        if job.watched is not None:
            beside = f"\nBeside background job {job.watched.id}: $ {job.watched.command}"
        return (
            f"Wait {job.id}{label} is over: {job.outcome}\nuntil: {job.check}{beside}\n"
            f"Last checks ({job.log_path}):\n{tail}"
        )
    return (
        f"Background job {job.id}{label} ended: {job.outcome}\n$ {job.command}\n"
        f"Last lines of {job.log_path}:\n{tail}"
    )
