"""message_agent between bots of one home, and bot_create: a bot made live and answering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel
from atlas.agents.services import provide_services
from atlas.channels.base import Address
from atlas.config import load_bot_settings
from atlas.dispatch import Dispatcher, Inbound
from atlas.errors import AtlasError
from atlas.home import Home
from atlas.newbot import create_bot
from atlas.providers.base import ProviderCallError, ToolCall
from atlas.providers.scripted import Reply
from atlas.runtime import Runtime
from atlas.tools.agents import AGENT_TOOLS, bot_create, bot_create_question, message_agent
from atlas.tools.registry import RunContext, Tool, ToolRegistry
from atlas.trust.gate import Decision, OpenGate
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "test", "chat-1", user="u1")
CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[review]\nenabled = false\n"


class BotCreateAsks(OpenGate):
    """The rule RuleGate needs (see the report): bot_create is always asked."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        if tool.name == "bot_create":
            return bot_create_question(tool.parse_arguments(call.arguments))
        return await super().decide(call, tool, run)


class Setup:
    def __init__(self, home: Home, model: ConversationModel, answer: str | None = None) -> None:
        self.home = home
        self.model = model
        self.runtime = Runtime(
            home, model=model, registry=ToolRegistry(AGENT_TOOLS), gate=BotCreateAsks()
        )
        self.channel = RecordingChannel(answer=answer)
        self.agents = AgentChannel(reply_seconds=5)
        self.dispatcher = Dispatcher(self.runtime, {"test": self.channel, "agents": self.agents})
        self.services = provide_services(self.dispatcher)

    async def close(self) -> None:
        await self.services.close()
        await self.agents.stop()
        await self.dispatcher.shutdown()
        await self.runtime.close()

    async def messages(self, bot: str, channel: str, chat: str, user: str = "") -> list[str]:
        store = await self.runtime.store(self.home.bot(bot))
        conversation = await store.conversation(channel, chat, user=user, bot=bot)
        return [m.content for m in await store.history(conversation.id)]


@pytest.fixture
def two_bots(tmp_path: Path) -> Home:
    home = make_home(tmp_path / "home", config=CONFIG)
    create_bot(home, "scout", "Scout", "Finds facts on the web.")
    return home


async def test_two_bots_message_each_other(two_bots: Home) -> None:
    greet = asyncio.Event()  # atlas answers scout's greeting once scout's answer is in
    model = ConversationModel(
        {
            "ask scout": [
                Reply(calls=[("message_agent", {"target": "scout", "message": "what is 2+2?"})]),
                Reply("I asked scout."),
                Reply("Scout says 4."),  # the turn started by the reply's notice
                Reply("Scout thanked me."),  # the turn started by scout's later message
            ],
            "what is 2+2?": [
                Reply(calls=[("message_agent", {"target": "atlas", "message": "hi from scout"})]),
                Reply("4"),
                Reply("atlas greeted me back"),  # the turn started by atlas's reply
            ],
            "hi from scout": [Reply("hello scout", wait_for=greet)],
        }
    )
    s = Setup(two_bots, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "ask scout"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="atlas's second turn")
        greet.set()
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 3, what="atlas's third turn")
        assert s.channel.texts(ADDRESS) == ["I asked scout.", "Scout says 4.", "Scout thanked me."]
        first = model.requests("ask scout")[1].messages[-1].content
        assert first.startswith("Delivered to scout as msg-")
        # Scout's conversation with atlas holds the message, marked as from a bot.
        scout_side = await s.messages("scout", AGENTS_CHANNEL, "atlas")
        assert scout_side[0].startswith("[Message from bot 'atlas', delivery msg-")
        assert scout_side[0].endswith("what is 2+2?")
        # Atlas's reply to scout came back into scout's conversation as a notice.
        assert any(
            m.startswith("[notice] Reply from bot 'atlas'") and "hello scout" in m
            for m in scout_side
        )
        atlas_side = await s.messages("atlas", "test", "chat-1", user="u1")
        notices = [m for m in atlas_side if m.startswith("[notice]")]
        assert notices[0].startswith("[notice] Reply from bot 'scout' to your message msg-")
        assert notices[0].endswith(":\n\n4")
        assert notices[1] == "[notice] Later message from bot 'scout':\n\natlas greeted me back"
        # The roster is in the description, made for the run.
        tools = model.requests("ask scout")[0].tools
        described = next(t for t in tools if t.name == "message_agent").description
        assert "- scout (Scout): Finds facts on the web." in described
        assert "- atlas" not in described
        model.assert_complete()
    finally:
        await s.close()


async def test_a_failed_turn_comes_back_as_a_notice(two_bots: Home) -> None:
    model = ConversationModel(
        {
            "ask scout": [
                Reply(calls=[("message_agent", {"target": "scout", "message": "are you up?"})]),
                Reply("asked"),
                Reply("scout is down"),
            ],
            "are you up?": [Reply(error=ProviderCallError("model overloaded", retryable=False))],
        }
    )
    s = Setup(two_bots, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "ask scout"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="the failure notice")
        notice = [m for m in await s.messages("atlas", "test", "chat-1", "u1") if "[notice]" in m]
        assert notice[0].startswith("[notice] Reply from bot 'scout'")
        assert "Sorry" in notice[0] and "model overloaded" in notice[0]
    finally:
        await s.close()


async def test_message_agent_refuses_and_is_unavailable_where_it_should_be(
    two_bots: Home, tmp_path: Path
) -> None:
    run = run_context(two_bots)
    unknown = await message_agent.invoke(run, {"target": "nobody", "message": "hi"})
    assert unknown.is_error and "no bot named 'nobody'" in unknown.text and "scout" in unknown.text
    to_self = await message_agent.invoke(run, {"target": "atlas", "message": "hi"})
    assert to_self.is_error and "that is you" in to_self.text
    too_long = await message_agent.invoke(run, {"target": "scout", "message": "x" * 16_001})
    assert too_long.is_error and "16000" in too_long.text
    no_dispatcher = await message_agent.invoke(run, {"target": "scout", "message": "hi"})
    assert no_dispatcher.is_error and "no running dispatcher" in no_dispatcher.text
    assert message_agent.unavailable_reason(run_context(two_bots, kind="subagent"))
    alone = make_home(tmp_path / "alone", config=CONFIG)
    assert "only one bot" in message_agent.unavailable_reason(run_context(alone))


async def test_a_bot_is_created_and_answers(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG)
    created = {"name": "scout", "title": "Scout", "description": "Finds facts on the web."}
    model = ConversationModel(
        {
            "make me a scout": [
                Reply(calls=[("bot_create", created)]),
                Reply(calls=[("message_agent", {"target": "scout", "message": "introduce you"})]),
                Reply("Scout is ready."),
                Reply("Scout introduced itself."),
            ],
            "introduce you": [Reply("I am Scout, I find facts.")],
            "hello directly": [Reply("hi, scout here")],
        }
    )
    s = Setup(home, model, answer="allow once")
    try:
        assert message_agent.unavailable_reason(run_context(home))  # one bot so far
        await s.dispatcher.submit(Inbound(ADDRESS, "make me a scout"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="scout's answer")
        assert s.channel.questions == [
            "Create the bot 'scout' (Scout): Finds facts on the web.? Allow?"
        ]
        folder = home.bots_dir / "scout"
        for sub in ("memory", "skills", "workspace"):
            assert (folder / sub).is_dir()
        settings = load_bot_settings(folder / "bot.toml")
        assert (settings.title, settings.description) == ("Scout", "Finds facts on the web.")
        assert "You are Scout" in (folder / "MISSION.md").read_text()
        assert home.bots["scout"].settings.title == "Scout"
        # bot_create was deferred: sent only once called; message_agent joined once scout lived.
        first_tools = [t.name for t in model.requests("make me a scout")[0].tools]
        assert "bot_create" not in first_tools and "message_agent" not in first_tools
        second_tools = [t.name for t in model.requests("make me a scout")[1].tools]
        assert second_tools == ["message_agent", "bot_create"]
        notice = [m for m in await s.messages("atlas", "test", "chat-1", "u1") if "[notice]" in m]
        assert "I am Scout, I find facts." in notice[0]
        assert "You are Scout" in model.requests("introduce you")[0].system
        # And it answers people directly, without a restart.
        direct = Address("scout", "test", "chat-2", user="u1")
        await s.dispatcher.submit(Inbound(direct, "hello directly"))
        await s.dispatcher.wait_idle(direct)
        assert s.channel.texts(direct) == ["hi, scout here"]
        assert Home(home.root).bots.keys() == {"atlas", "scout"}  # and after a restart
        model.assert_complete()
    finally:
        await s.close()


async def test_bot_create_denied_by_the_user_creates_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG)
    model = ConversationModel(
        {
            "make a bot": [
                Reply(calls=[("bot_create", {"name": "x1", "title": "X", "description": "d"})]),
                Reply("not created"),
            ]
        }
    )
    s = Setup(home, model, answer="deny")
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "make a bot"))
        await s.dispatcher.wait_idle(ADDRESS)
        assert not (home.bots_dir / "x1").exists() and "x1" not in home.bots
        denied = model.requests("make a bot")[1].messages[-1].content
        assert "the user denied it" in denied
    finally:
        await s.close()


async def test_a_tool_not_offered_is_refused_before_anyone_is_asked(two_bots: Home) -> None:
    """scout (not the main agent) calls bot_create by name: the person is not asked to approve
    a call that cannot run, and the model reads why in plain words."""
    call = {"name": "x2", "title": "X", "description": "d"}
    model = ConversationModel({"make a bot": [Reply(calls=[("bot_create", call)]), Reply("ok")]})
    s = Setup(two_bots, model, answer="allow once")
    scout = Address("scout", "test", "chat-3", user="u1")
    try:
        await s.dispatcher.submit(Inbound(scout, "make a bot"))
        await s.dispatcher.wait_idle(scout)
        assert s.channel.questions == []
        result = model.requests("make a bot")[1].messages[-1].content
        assert result == (
            "Error: bot_create is not offered to this run: only the main agent (atlas) creates bots"
        )
        assert "x2" not in two_bots.bots
    finally:
        await s.close()


async def test_bot_create_rules(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG)
    run = run_context(home)
    bad_name = await bot_create.invoke(run, {"name": "Bad Name", "title": "t", "description": "d"})
    assert bad_name.is_error and "name" in bad_name.text
    two_lines = await bot_create.invoke(
        run, {"name": "ok", "title": "t", "description": "one\ntwo"}
    )
    assert two_lines.is_error and "one line" in two_lines.text
    taken = await bot_create.invoke(run, {"name": "atlas", "title": "t", "description": "d"})
    assert taken.is_error and "already exists" in taken.text
    assert "only in a conversation" in bot_create.unavailable_reason(
        run_context(home, kind="routine")
    )
    assert bot_create.unavailable_reason(run_context(home, kind="subagent"))
    made = await bot_create.invoke(
        run, {"name": "helper", "title": "Helper", "description": "Helps.", "mission": "Be brief."}
    )
    assert (
        not made.is_error and (home.bots_dir / "helper" / "MISSION.md").read_text() == "Be brief.\n"
    )
    assert "only the main agent" in bot_create.unavailable_reason(run_context(home, bot="helper"))
    with pytest.raises(AtlasError, match="already loaded"):
        home.add_bot("helper")
    assert not (home.root / ".staging" / "bot-helper").exists()


async def test_a_later_reply_still_reaches_the_sender(two_bots: Home) -> None:
    model = ConversationModel(
        {
            "ask scout": [
                Reply(calls=[("message_agent", {"target": "scout", "message": "long job"})]),
                Reply("asked"),
                Reply("scout is working"),
                Reply("scout finished"),
            ],
            "long job": [Reply("working on it"), Reply("final answer: 42")],
        }
    )
    s = Setup(two_bots, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "ask scout"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="the first reply")
        # Something later starts a turn in scout's conversation with atlas (a subagent's notice).
        scout_side = Address("scout", AGENTS_CHANNEL, "atlas")
        await s.dispatcher.submit(Inbound(scout_side, "subagents done", kind="notice"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 3, what="the later reply")
        notices = [m for m in await s.messages("atlas", "test", "chat-1", "u1") if "[notice]" in m]
        assert "working on it" in notices[0]
        assert notices[1] == "[notice] Later message from bot 'scout':\n\nfinal answer: 42"
        model.assert_complete()
    finally:
        await s.close()
