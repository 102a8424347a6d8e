"""A stop asked in one process reaches a turn another worker process runs (Telegram's /new
and Slack's `new` for a spread bot: its channel in the owner, the conversation elsewhere)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from atlas.channels.base import Address
from atlas.dispatch import Inbound
from atlas.newbot import create_bot
from atlas.providers.scripted import Reply
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.worker_rig import CHANNEL, linked_shares
from tests.helpers import BASE_CONFIG, make_home

CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[review]\nenabled = false\n"


async def test_a_stop_from_the_home_process_ends_a_workers_turn(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG)
    create_bot(home, "scout", "Scout", "Finds facts.")
    never = asyncio.Event()  # the worker's turn waits on its model until stopped
    there = ConversationModel({"slow question": [Reply("too late", wait_for=never)]})
    async with linked_shares(
        home.root, (("atlas",), ("scout",)), [ConversationModel({}), there]
    ) as linked:
        address = Address("scout", CHANNEL, "chat-1", user="u1")
        await linked[0].dispatcher.submit(Inbound(address, "slow question"))  # routed there
        worker = linked[1].dispatcher
        await eventually(lambda: worker._lanes.get(address) is not None
                         and worker._lanes[address].turn is not None, what="the worker's turn")  # fmt: skip
        assert linked[0].dispatcher.stop_turn(address) is False  # not in the home's process
        assert await linked[0].dispatcher.stop_turn_anywhere(address) is True
        await eventually(lambda: linked[1].channel.texts(address) == ["Stopped."], what="stop")
        assert await linked[0].dispatcher.stop_turn_anywhere(address) is False  # nothing left
