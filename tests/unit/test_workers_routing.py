"""message_agent between bots of different processes (HomeServices.message_bot → Elsewhere's
deliver and notify, atlas/workers/routing.py): each share in one event loop with its own
Dispatcher, Runtime and model, over real socketpair links (tests/fakes/worker_rig.py). Each
process's model has only the scripts of its own bots' conversations, so a turn that ran in the
wrong process fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.agents.channel import AGENTS_CHANNEL
from atlas.channels.base import Address
from atlas.dispatch import Inbound
from atlas.home import Home
from atlas.newbot import create_bot
from atlas.providers.scripted import Reply
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.worker_rig import CHANNEL, Share, linked_shares
from tests.helpers import BASE_CONFIG, make_home

CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[review]\nenabled = false\n"


@pytest.fixture
def three_bots(tmp_path: Path) -> Home:
    home = make_home(tmp_path / "home", config=CONFIG)
    create_bot(home, "scout", "Scout", "Finds facts on the web.")
    create_bot(home, "critic", "Critic", "Reviews drafts.")
    return home


async def history(share: Share, bot: str, channel: str, chat: str, user: str = "") -> list[str]:
    store = await share.runtime.store(share.home.bot(bot))
    conversation = await store.conversation(channel, chat, user=user, bot=bot)
    return [m.content for m in await store.history(conversation.id)]


async def test_message_agent_to_a_bot_of_a_worker_runs_there_and_the_reply_comes_back(
    three_bots: Home,
) -> None:
    here = ConversationModel(
        {
            "ask scout": [
                Reply(calls=[("message_agent", {"target": "scout", "message": "what is 2+2?"})]),
                Reply("I asked scout."),
                Reply("Scout says 4."),  # the turn the reply's notice starts
            ]
        }
    )
    there = ConversationModel({"what is 2+2?": [Reply("4")]})
    shares = (("atlas",), ("scout", "critic"))
    async with linked_shares(three_bots.root, shares, [here, there]) as linked:
        home, worker = linked[0], linked[1]
        person = Address("atlas", CHANNEL, "chat-1", user="u1")
        await home.dispatcher.submit(Inbound(person, "ask scout"))
        await eventually(lambda: len(home.channel.texts(person)) == 2, what="the reply's turn")
        assert home.channel.texts(person) == ["I asked scout.", "Scout says 4."]
        # Scout's turn ran in the worker: its conversation is in the worker's store only.
        scout_side = await history(worker, "scout", AGENTS_CHANNEL, "atlas")
        assert scout_side[0].startswith("[Message from bot 'atlas', delivery msg-")
        assert scout_side[-1] == "4"
        assert "scout" not in home.runtime._stores
        # Delivered over the link; the reply's notify came back through it ("route" to share 0).
        assert worker.answered == ["deliver"] and home.answered == ["route"]
        # The reply came back into atlas's conversation, in the home's process, as a notice.
        notices = [
            m for m in await history(home, "atlas", CHANNEL, "chat-1", "u1") if "[notice]" in m
        ]
        assert notices[0].startswith("[notice] Reply from bot 'scout' to your message msg-")
        assert notices[0].endswith(":\n\n4")
        here.assert_complete()
        there.assert_complete()


async def test_message_agent_between_two_workers_goes_through_the_home(three_bots: Home) -> None:
    home_model = ConversationModel({})  # the home's process runs no turn here
    first = ConversationModel(
        {
            "ask critic": [
                Reply(calls=[("message_agent", {"target": "critic", "message": "review this"})]),
                Reply("I asked critic."),
                Reply("Critic likes it."),
            ]
        }
    )
    second = ConversationModel({"review this": [Reply("Looks fine.")]})
    shares = (("atlas",), ("scout",), ("critic",))
    async with linked_shares(three_bots.root, shares, [home_model, first, second]) as linked:
        person = Address("scout", CHANNEL, "chat-7", user="u7")
        await linked[1].dispatcher.submit(Inbound(person, "ask critic"))
        await eventually(lambda: len(linked[1].channel.texts(person)) == 2, what="the notice")
        assert linked[1].channel.texts(person) == ["I asked critic.", "Critic likes it."]
        critic_side = await history(linked[2], "critic", AGENTS_CHANNEL, "scout")
        assert critic_side[0].endswith("review this") and critic_side[-1] == "Looks fine."
        # Worker 1's delivery and worker 2's reply each went through the home: op "route".
        assert linked[0].answered.count("route") == 2
        assert "deliver" in linked[2].answered and "notify" in linked[1].answered
        scout_side = await history(linked[1], "scout", CHANNEL, "chat-7", "u7")
        assert any(m.startswith("[notice] Reply from bot 'critic'") for m in scout_side)
        first.assert_complete()
        second.assert_complete()
