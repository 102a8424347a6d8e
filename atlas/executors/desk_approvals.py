"""Where the permission prompts of the person's own Claude Code sessions are asked.

`[executors.claude-code] approvals` names the channel (`telegram:atlas`, `slack:atlas`), or
"off" (Claude Code asks at the desk, as without the plugin); `approvals_chat` the chat in it.
Unset: the main bot's chat channels. Without a chat, the person's most recent conversation there
(the main bot's store, newest first) is where the question goes: the place they last talked to
Atlas from. The question is put with the channel's own buttons, as the gate puts its Ask.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from atlas.channels.base import Address

if TYPE_CHECKING:
    from atlas.channels.base import Channel
    from atlas.config import ExecutorSettings
    from atlas.pending_asks import PendingAsks
    from atlas.store.conversations import ConversationStore
    from atlas.tools.registry import Asker

log = logging.getLogger(__name__)

CHAT_PLATFORMS = ("telegram", "slack")  # channels a person answers from (not the terminal)
RECENT = 50  # conversations looked at for the most recent one on the channel
StoreOf = Callable[[str], Awaitable["ConversationStore"]]  # a bot's name -> its store


class DeskApprovals:
    """Finds, at each prompt, whom to ask: the conversation may have moved since the last."""

    def __init__(
        self,
        settings: ExecutorSettings | None,
        main_bot: str,
        channels: Mapping[str, Channel],
        store_of: StoreOf,
        asks: PendingAsks | None = None,
    ) -> None:
        self.asks = asks  # the home's waiting questions: the dashboard's Waiting page answers too
        self.settings = settings
        self.main_bot = main_bot
        self.channels = channels
        self.store_of = store_of

    def _candidates(self) -> list[str]:
        named = self.settings.approvals if self.settings is not None else None
        if named == "off":
            return []
        if named:
            return [named] if named in self.channels else []
        return [
            name
            for name in self.channels
            if name.partition(":")[0] in CHAT_PLATFORMS and name.partition(":")[2] == self.main_bot
        ]

    async def address(self) -> Address | None:
        """The conversation to ask in; None when there is none (Claude Code asks at the desk)."""
        candidates = self._candidates()
        if not candidates:
            return None
        chat = self.settings.approvals_chat if self.settings is not None else None
        bot = candidates[0].partition(":")[2] or self.main_bot
        from atlas.store.search import MessageFilter

        store = await self.store_of(bot)
        recent = await store.summarise_conversations(
            MessageFilter(roles=("user",)), sort="newest", limit=RECENT
        )
        for summary in recent:
            c = summary.conversation
            if c.kind == "conversation" and c.channel in candidates and chat in (None, c.chat):
                return Address(c.bot, c.channel, c.chat, c.thread, c.user)
        if chat is not None:  # a chat named but never talked in yet: ask there all the same
            return Address(bot, candidates[0], chat)
        return None

    async def asker(self) -> tuple[Asker, Address] | None:
        where = await self.address()
        if where is None:
            return None
        channel = self.channels[where.channel]

        async def ask(question: str, choices: list[str]) -> str | None:
            if self.asks is None:
                return await channel.ask(where, question, choices)
            # No conversation of Atlas's waits on it (id 0): it is a session at the desk.
            return await self.asks.approval(
                where, 0, question, choices, lambda: channel.ask(where, question, choices)
            )

        return ask, where
