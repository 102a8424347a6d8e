"""Where a routine reports, checked when it is written (a file, `cronjob_manage`): a channel
named by its platform alone (`telegram`) is the routine's own bot's channel on it
(`telegram:<bot>`), and a channel no bot of the home runs is an error, not a report that
silently never arrives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from atlas.errors import ConfigError

if TYPE_CHECKING:
    from atlas.home import Home


def home_channels(home: Home) -> dict[str, list[str]]:
    """Each bot's enabled chat platforms (`telegram`, `slack`), by bot."""
    from atlas.channels.settings import configured_platforms

    return {name: configured_platforms(bot) for name, bot in home.bots.items()}


def resolve_channel(home: Home, bot: str, channel: str, *, strict: bool = True) -> str:
    """The full channel name a routine of `bot` reports through; ConfigError (a sentence, no
    file named: the caller adds where it was written) when no such channel runs. Not
    `strict` (a running daemon's tool): a name on no chat platform Atlas configures is kept
    as given, as the daemon may run such a channel (a plugin's) that bot.toml does not show."""
    from atlas.channels.settings import chat_platforms

    if not strict and channel.partition(":")[0] not in chat_platforms():
        return channel
    channels = home_channels(home)
    known = [
        f"{platform}:{owner}" for owner, platforms in channels.items() for platform in platforms
    ]
    platform, _, owner = channel.partition(":")
    if not owner:
        if platform in channels.get(bot, []):
            return f"{platform}:{bot}"
        own = ", ".join(channels.get(bot, [])) or "none"
        raise ConfigError(
            f"channel {channel!r}: bot {bot!r} has no {platform} channel (its channels: {own}); "
            f"configure [channels.{platform}] in bots/{bot}/bot.toml, or name one of: "
            f"{', '.join(known) or 'no bot has a chat channel'}"
        )
    if channel in known:
        return channel
    raise ConfigError(
        f"channel {channel!r} is not a channel of this home (known: "
        f"{', '.join(known) or 'none: no bot has a [channels.*] table'})"
    )


UNDELIVERED_PREFIXES = ("not delivered", "may not have reached")


def delivered_badly(status: str, delivery: str) -> bool:
    """A run that ended well but whose report did not (surely) arrive: shown as such, not ok."""
    return status == "ok" and delivery.startswith(UNDELIVERED_PREFIXES)
