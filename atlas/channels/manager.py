"""Start every bot's chat channels together; one failing never stops the others.

A channel is a plugin (entry-point group `atlas.channels`, atlas/plugins.py), loaded only when
some bot configures its platform, since aiogram and slack-bolt take seconds to import: Telegram
(`atlas/channels/telegram/`) and Slack (`atlas/channels/slack/`) register the same way, in
pyproject.toml. Each class has `create(bot, dispatcher) -> Channel`; the channel is named
`<platform>:<bot>`, which is the `Address.channel` of its conversations and its key in `dispatcher.channels`.

Each channel's health (atlas/channels/supervisor.py) starts here: a start that fails makes it
"reconnecting since T (why)" until a retry succeeds; a ConfigError (a token that can never
work) makes it "stopped" with the error, and is not retried.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from atlas.channels.base import Channel
from atlas.channels.settings import configured_platforms
from atlas.channels.supervisor import ChannelHealth, brief
from atlas.errors import AtlasError, ConfigError
from atlas.home import Bot, Home
from atlas.plugins import CHANNELS_GROUP, PluginError, load_plugin

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

FIRST_DELAY = 1.0
MAX_DELAY = 60.0
STOP_TIMEOUT = 5.0


def channel_name(platform: str, bot: str) -> str:
    return f"{platform}:{bot}"


class RunningChannels(dict[str, Channel]):
    """The channels by name, plus the tasks that (re)start them (what stop_channels ends) and
    each one's health."""

    def __init__(self) -> None:
        super().__init__()
        self.supervisors: dict[str, asyncio.Task[None]] = {}
        self.health: dict[str, ChannelHealth] = {}


def health_of(name: str, channel: Channel) -> ChannelHealth:
    """The channel's own health (Telegram and Slack keep one); a new one for others."""
    health = getattr(channel, "health", None)
    return health if isinstance(health, ChannelHealth) else ChannelHealth(name)


def create_channel(bot: Bot, platform: str, dispatcher: Dispatcher) -> Channel:
    """The platform's channel for the bot, from the channel plugin registered under that name
    (entry-point group `atlas.channels`; Telegram and Slack register the same way)."""
    try:
        plugin = load_plugin(CHANNELS_GROUP, platform)
    except PluginError as exc:
        raise ConfigError(f"{bot.root / 'bot.toml'}: [channels.{platform}]: {exc}") from exc
    channel: Channel = plugin.target.create(bot, dispatcher)
    return channel


async def _keep_started(
    name: str,
    channel: Channel,
    health: ChannelHealth,
    started: asyncio.Event,
    first_delay: float,
    max_delay: float,
) -> None:
    """Start the channel; on failure log it and try again, waiting longer each time."""
    delay = first_delay
    attempt = 0
    while True:
        attempt += 1
        try:
            await channel.start()
        except ConfigError as exc:
            log.error("channel %s not started: %s", name, exc)
            health.stopped(f"could not start: {exc}")
            started.set()
            return
        except (AtlasError, OSError, TimeoutError, RuntimeError, ValueError) as exc:
            # A channel library raises its own errors too (network, auth); all are retried.
            log.warning("channel %s failed to start (attempt %d): %s", name, attempt, exc)
            health.reconnecting(f"could not start (attempt {attempt}): {brief(exc)}")
        except Exception as exc:
            log.exception("channel %s failed to start (attempt %d)", name, attempt)
            health.reconnecting(f"could not start (attempt {attempt}): {brief(exc)}")
        else:
            log.info("channel %s started", name)
            if getattr(channel, "health", None) is not health:
                health.up("started")  # a channel that reports no health of its own
            started.set()
            return
        started.set()  # the first attempt is over: the daemon need not wait any longer
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)


async def start_channels(
    home: Home,
    dispatcher: Dispatcher,
    *,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
    wait: float = 30.0,
    bots: list[Bot] | None = None,
    into: RunningChannels | None = None,
) -> RunningChannels:
    """Create and start every configured channel of every bot (or of `bots`: a node starts a
    bot's when it gains its lease), concurrently, added to `into` when given. A channel whose
    settings are wrong is logged and skipped; one that fails to start keeps being retried in the
    background. Returns once each has had its first attempt (or after `wait` seconds)."""
    running = into if into is not None else RunningChannels()
    first_attempts: list[asyncio.Task[bool]] = []
    for bot in home.owned_bots() if bots is None else bots:
        try:
            platforms = configured_platforms(bot)
        except AtlasError as exc:
            log.error("bot %s: %s", bot.name, exc)
            continue
        for platform in platforms:
            name = channel_name(platform, bot.name)
            try:
                channel = create_channel(bot, platform, dispatcher)
            except AtlasError as exc:
                log.error("channel %s not started: %s", name, exc)
                continue
            running[name] = channel
            running.health[name] = health = health_of(name, channel)
            dispatcher.channels[name] = channel  # replies must find it from the first message
            started = asyncio.Event()
            running.supervisors[name] = asyncio.create_task(
                _keep_started(name, channel, health, started, first_delay, max_delay),
                name=f"start {name}",
            )
            first_attempts.append(asyncio.create_task(started.wait()))
    if first_attempts:
        done, pending = await asyncio.wait(first_attempts, timeout=wait)
        for task in pending:
            task.cancel()
    return running


async def stop_channels(running: RunningChannels, *, timeout: float = STOP_TIMEOUT) -> None:
    """Stop retrying and stop every channel, together, each within `timeout` seconds."""
    for task in running.supervisors.values():
        task.cancel()
    await asyncio.gather(*running.supervisors.values(), return_exceptions=True)

    async def stop_one(name: str, channel: Channel) -> None:
        try:
            async with asyncio.timeout(timeout):
                await channel.stop()
        except TimeoutError:
            log.warning("channel %s did not stop within %.0f s", name, timeout)
        except Exception:
            log.exception("channel %s failed while stopping", name)
        health = running.health.get(name)
        if health is not None:
            health.stopped("Atlas stopped")

    await asyncio.gather(*(stop_one(name, channel) for name, channel in running.items()))


async def stop_bot_channels(
    running: RunningChannels, bot: str, *, timeout: float = STOP_TIMEOUT
) -> list[str]:
    """Stop one bot's channels (its node lost the bot's lease: another polls its token now)
    and take them out of `running`; their names."""
    names = [name for name in running if name.partition(":")[2] == bot]
    mine = RunningChannels()
    for name in names:
        mine[name] = running.pop(name)
        task = running.supervisors.pop(name, None)
        if task is not None:
            mine.supervisors[name] = task
        health = running.health.pop(name, None)
        if health is not None:
            mine.health[name] = health
    await stop_channels(mine, timeout=timeout)
    return names


__all__ = [
    "RunningChannels",
    "channel_name",
    "health_of",
    "start_channels",
    "stop_bot_channels",
    "stop_channels",
]
