"""Channel health, and the supervisor that keeps a channel's long-running task alive.

A channel's connection runs in a task (Telegram's poller, the watch over Slack's Socket Mode
client). Such a task must never die unseen: the daemon would stay up, deaf. `Supervisor` runs
it; if it ends or raises (anything but being stopped), the failure is logged with its traceback,
the channel's health says "reconnecting since T (why)", and the task starts again after a wait
that doubles each time up to a cap (the `[limits]` retry delays).

`ChannelHealth` is what `/status` and `atlas doctor` show: starting, up (polling, connected…),
reconnecting since T and why, or stopped and why. Listeners (the daemon's run file) hear every
change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

log = logging.getLogger(__name__)

HealthState = Literal["starting", "up", "reconnecting", "stopped"]
REASON_CHARS = 300  # a reason is one line of /status, not a traceback (the log has that)
# [limits] retry_base_delay may be 0; a task failing at once must still not spin and flood the log.
MIN_RESTART_DELAY = 0.05


def brief(exc: BaseException) -> str:
    """An exception as one short line: its type and message."""
    text = " ".join(str(exc).split()) or "no message"
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class Health:
    """One channel's state since `since`; `activity` names what "up" is doing (polling…)."""

    state: HealthState
    since: datetime
    reason: str = ""
    activity: str = ""

    def describe(self) -> str:
        when = self.since.strftime("%Y-%m-%d %H:%M:%S UTC")
        if self.state == "up":
            return f"{self.activity or 'up'} since {when}"
        if self.state == "reconnecting":
            return f"reconnecting since {when} ({self.reason})"
        if self.state == "stopped":
            return f"stopped at {when}: {self.reason}"
        return f"starting since {when}"

    def as_json(self) -> dict[str, str]:
        return {
            "state": self.state,
            "since": self.since.isoformat(),
            "reason": self.reason,
            "activity": self.activity,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Health:
        """ValueError (or KeyError, TypeError) when `data` is not what `as_json` wrote."""
        state = data["state"]
        if state not in ("starting", "up", "reconnecting", "stopped"):
            raise ValueError(f"unknown state {state!r}")
        since = datetime.fromisoformat(data["since"])
        return cls(state, since, str(data.get("reason", "")), str(data.get("activity", "")))


class ChannelHealth:
    """The current health of one channel, and who hears of its changes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.current = Health("starting", utc_now())
        # Why inbound messages are held unconfirmed (the store cannot write), while that lasts:
        # a successful poll must not report the channel healthy meanwhile.
        self.holding = ""
        self._listeners: list[Callable[[str, Health], None]] = []

    def listen(self, listener: Callable[[str, Health], None]) -> None:
        self._listeners.append(listener)

    def up(self, activity: str) -> None:
        self._set("up", activity=activity)

    def reconnecting(self, reason: str) -> None:
        self._set("reconnecting", reason=reason)

    def stopped(self, reason: str) -> None:
        self._set("stopped", reason=reason)

    def become(self, health: Health) -> None:
        """Take on a health reported from elsewhere (a channel in a worker process)."""
        self.current = health
        self._tell()

    def _set(self, state: HealthState, *, reason: str = "", activity: str = "") -> None:
        now = self.current
        if now.state == state and now.reason == reason and now.activity == activity:
            return
        if now.state == state:
            # Still the same trouble (a new reason) or the same work: keep when it began.
            self.current = replace(now, reason=reason, activity=activity)
        else:
            self.current = Health(state, utc_now(), reason, activity)
        self._tell()

    def _tell(self) -> None:
        for listener in self._listeners:
            try:
                listener(self.name, self.current)
            except Exception:  # a listener's fault must not stop the channel's own work
                log.exception("%s: a health listener failed", self.name)


class Supervisor:
    """Runs `run()` (a fresh coroutine each time) until `stop()`; restarts it with backoff when
    it raises or returns. The restarted work reports "up" itself, once it really is."""

    def __init__(
        self,
        what: str,
        run: Callable[[], Awaitable[None]],
        health: ChannelHealth,
        *,
        first_delay: float,
        max_delay: float,
    ) -> None:
        self.what = what  # e.g. "telegram:atlas polling", for the log and the task's name
        self._run = run
        self.health = health
        self.first_delay = max(first_delay, MIN_RESTART_DELAY)
        self.max_delay = max(max_delay, self.first_delay)
        self.restarts = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._keep_running(), name=self.what)

    async def stop(self) -> None:
        """Cancel the work and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _keep_running(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.first_delay
        while True:
            began = loop.time()
            try:
                await self._run()
            except Exception as exc:
                log.exception("%s failed; restarting in %g s", self.what, delay)
                why = brief(exc)
            else:
                log.error("%s ended unexpectedly; restarting in %g s", self.what, delay)
                why = "it ended unexpectedly"
            self.health.reconnecting(f"{why}; restart {self.restarts + 1}")
            await asyncio.sleep(delay)
            self.restarts += 1
            # Work that ran a good while before failing is not a crash loop: start over fast.
            ran_long = loop.time() - began > self.max_delay
            delay = self.first_delay if ran_long else min(delay * 2, self.max_delay)


def health_lines(channels: Mapping[str, object], bot: str) -> list[str]:
    """One line per channel of `bot` that reports health (named `<platform>:<bot>`)."""
    lines = []
    for name, channel in sorted(channels.items()):
        health = getattr(channel, "health", None)
        if isinstance(health, ChannelHealth) and name.partition(":")[2] == bot:
            lines.append(f"{name}: {health.current.describe()}")
    return lines


__all__ = [
    "ChannelHealth",
    "Health",
    "HealthState",
    "Supervisor",
    "brief",
    "health_lines",
    "utc_now",
]
