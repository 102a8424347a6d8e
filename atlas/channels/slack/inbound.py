"""What reaches the Slack channel: messages and mentions (each seen once), their files, the
`!new`/`!stop`/`!status` commands and their slash-command twins, turned into turns for the
dispatcher under their conversation key.

A thread is one conversation keyed by its root (so the `thread_ts` replied into and the
conversation key come from the same message). `!new` bumps a generation kept in atlas.db (as
Telegram's `/new` does): the chat key becomes `<channel id>#<generation>`, so the old
conversation stays stored and searchable. Only allowed or paired users reach the model; a
stranger gets one reply with a pairing code.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from atlas.channels.base import Address
from atlas.channels.chat_common import NEW_CONVERSATION, ChatGenerations
from atlas.channels.inbox import FileTooLarge, check_size, name_files, save_stream
from atlas.channels.send_errors import SendError
from atlas.channels.settings import SlackSettings
from atlas.channels.slack.asking import SlackAsking
from atlas.channels.slack.sending import slack_channel
from atlas.channels.store_faults import store_cannot_write
from atlas.channels.supervisor import ChannelHealth
from atlas.errors import AtlasError
from atlas.home import Bot

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

COMMANDS = ("new", "stop", "status")
# Message subtypes that are people talking; edits, joins and bot posts are not.
_TALK_SUBTYPES = (None, "file_share", "thread_broadcast")
_SEEN_LIMIT = 2048


def parse_command(text: str) -> str | None:
    """`!new` / `/new` and the like → "new"; None for anything else."""
    word = text.strip().lower()
    if len(word) > 1 and word[0] in "!/" and word[1:] in COMMANDS:
        return word[1:]
    return None


class StoreHeld(AtlasError):
    """A message was not stored because the store cannot write: Slack must send it again."""


class SlackInbound(SlackAsking):
    """Events in, turns out. SlackChannel sets the state below."""

    bot: Bot
    health: ChannelHealth
    activity: str  # what the channel's health says while it is up
    settings: SlackSettings
    dispatcher: Dispatcher
    bot_user_id: str
    generations: ChatGenerations
    _bot_token: str
    _seen: OrderedDict[tuple[str, str], None]
    _threads: set[tuple[str, str]]  # (channel, root) the bot talks in

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """A message or a mention, acknowledged to Slack when this returns (the channel runs
        bolt with process_before_response): it returns once the message is stored. When the
        store cannot write it raises StoreHeld: Slack gets a 5xx (Events API) or no ack
        (Socket Mode) and sends the event again, which is then handled afresh."""
        if not self._is_talk(event):
            return
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        if not self._first_sight(channel, ts):
            return  # a redelivery, or the app_mention twin of a message event
        try:
            await self._take_message(event, body, channel, ts)
        except Exception as exc:
            self._seen.pop((channel, ts), None)  # Slack sends it again: handle it then
            if why := store_cannot_write(exc):
                raise self._hold(why) from exc
            raise
        self._holding_over()

    async def _take_message(
        self, event: dict[str, Any], body: dict[str, Any], channel: str, ts: str
    ) -> None:
        """Filter, check who it is, then hand it to the dispatcher (which stores it). What
        is posted back (a pairing code, a command's answer) goes in the background."""
        is_dm = event.get("channel_type") == "im"
        root = str(event.get("thread_ts") or "")
        if not is_dm and not await self._addressed_to_us(event, channel, root):
            return
        user = str(event.get("user", ""))
        thread = root if is_dm else (root or ts)
        chat = await self.generations.chat_key(channel, thread)
        address = Address(self.bot.name, self.name, chat, thread)
        if not await self.access.is_allowed(user):
            self._background.spawn(self._greet_stranger(address, user, is_dm))
            return
        if not is_dm:
            self._threads.add((channel, address.thread))
        text = self._strip_mention(str(event.get("text") or ""))
        if (command := parse_command(text)) is not None:
            await self._run_command(command, address)
            return
        try:
            files = await self._download_files(event)
        except (FileTooLarge, SendError, aiohttp.ClientError) as exc:
            self._background.spawn(
                self._send_quietly(address, f"I could not take that file: {exc}")
            )
            return
        from atlas.dispatch import Inbound

        self._last_message[address] = (channel, ts)
        event_id = str(event.get("client_msg_id") or body.get("event_id") or f"{channel}:{ts}")
        turn_text = name_files(text, files, self.bot.workspace)
        await self.dispatcher.submit(
            Inbound(address, turn_text, event_id=event_id, files=tuple(files))
        )

    def _hold(self, why: str) -> StoreHeld:
        """The store cannot write: the event stays unacknowledged (Slack sends it again, a few
        times over about an hour) for as long as that lasts; the log (once) and the channel's
        health (the dashboard, doctor, /status) say so."""
        reason = f"messages held unacknowledged: the store cannot write ({why})"
        if not self.health.holding:
            log.error("%s: %s; Slack will send them again", self.name, reason)
        self.health.holding = reason
        self.health.reconnecting(reason)
        return StoreHeld(f"{self.name}: {reason}")

    def _holding_over(self) -> None:
        if self.health.holding:
            self.health.holding = ""
            log.warning("%s: the store writes again; messages are acknowledged again", self.name)
            self.health.up(self.activity)

    async def _greet_stranger(self, address: Address, user: str, is_dm: bool) -> None:
        """The pairing reply to someone not yet allowed: in a channel, only they see it."""
        channel = slack_channel(address)
        reply = await self.access.stranger(user, chat=channel)
        if reply and is_dm:
            await self._send_quietly(address, reply)
        elif reply:
            await self._safe_call(
                "chat.postEphemeral",
                channel=channel,
                user=user,
                text=reply,
                thread_ts=address.thread,
            )

    def _is_talk(self, event: dict[str, Any]) -> bool:
        if event.get("subtype") not in _TALK_SUBTYPES or event.get("bot_id"):
            return False
        return bool(event.get("user")) and event.get("user") != self.bot_user_id

    def _first_sight(self, channel: str, ts: str) -> bool:
        key = (channel, ts)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    async def _addressed_to_us(self, event: dict[str, Any], channel: str, root: str) -> bool:
        """In a channel: a mention, a reply in a thread we talk in, or `groups = "all"`."""
        if event.get("type") == "app_mention" or f"<@{self.bot_user_id}>" in str(event.get("text")):
            return True
        if self.settings.groups == "all":
            return True
        return bool(root) and (
            (channel, root) in self._threads or await self._known_thread(channel, root)
        )

    async def _known_thread(self, channel: str, root: str) -> bool:
        """A thread with a stored conversation (so replies keep working after a restart)."""
        store = await self.dispatcher.runtime.store(self.bot)
        if await store.thread_known(self.name, channel, root):
            self._threads.add((channel, root))
            return True
        return False

    def _strip_mention(self, text: str) -> str:
        return text.replace(f"<@{self.bot_user_id}>", "").strip() if self.bot_user_id else text

    # --- files ---------------------------------------------------------------------------------

    async def _download_files(self, event: dict[str, Any]) -> list[Path]:
        """Every file of the message, into the bot's inbox; FileTooLarge past the size limit."""
        paths = []
        for shared in event.get("files") or []:
            info = shared
            if not info.get("url_private_download") and not info.get("url_private"):
                info = (await self.sender.call("files.info", file=shared["id"]))["file"]
            name = str(info.get("name") or info.get("id") or "file")
            limit = self.settings.inbox_max_bytes
            check_size(info.get("size"), limit, name)
            url = info.get("url_private_download") or info["url_private"]
            paths.append(await save_stream(self.bot, name, self._fetch(url), limit))
        return paths

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        headers = {"Authorization": f"Bearer {self._bot_token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers=headers) as response,
        ):
            response.raise_for_status()
            if response.content_type == "text/html":
                # Slack answers a download it will not give with its login page, status 200.
                raise SendError(f"Slack would not hand over {url} (is files:read granted?)")
            async for chunk in response.content.iter_chunked(64 * 1024):
                yield chunk

    # --- commands ------------------------------------------------------------------------------

    async def _run_command(self, command: str, address: Address) -> None:
        """`!new`, `!stop`, `!status` (and the same slash commands)."""
        from atlas.dispatch import Inbound

        if command == "new":
            # The next message here starts a fresh conversation; this one stays stored.
            await self.dispatcher.stop_turn_anywhere(address)
            await self.generations.bump(slack_channel(address), address.thread)
            self._background.spawn(self._send_quietly(address, NEW_CONVERSATION))
        else:  # its answer is posted in the background: the ack must not wait on Slack
            self._background.spawn(self.dispatcher.submit(Inbound(address, f"/{command}")))

    async def _on_slash_command(self, ack: Any, command: dict[str, Any]) -> None:
        """Slash commands reach channels and DMs, never threads: they act on the top level."""
        user = str(command.get("user_id", ""))
        if not await self.access.is_allowed(user):
            await ack("Only people this bot's owner approved can use its commands.")
            return
        await ack()
        channel = str(command.get("channel_id", ""))
        address = Address(self.bot.name, self.name, await self.generations.chat_key(channel))
        await self._run_command(str(command.get("command", "")).lstrip("/"), address)


__all__ = ["COMMANDS", "SlackInbound", "StoreHeld", "parse_command"]
