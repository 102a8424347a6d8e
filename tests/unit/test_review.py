"""The background review: after a quiet spell it keeps what was learned, asks before changing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.catalog import default_registry
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home

ADDRESS = Address("atlas", "test", "chat-1", user="u1")


def review_home(root: Path, *, enabled: bool = True):  # type: ignore[no-untyped-def]
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f"\n[review]\nenabled = {'true' if enabled else 'false'}\nquiet_minutes = 0.002\n"
        "min_user_messages = 2\n"
    )
    return make_home(root, config=config)


async def chat(home, model, channel, texts):  # type: ignore[no-untyped-def]
    runtime = Runtime(home, model=model, registry=default_registry())
    dispatcher = Dispatcher(runtime, {"test": channel})
    for text in texts:
        await dispatcher.submit(Inbound(ADDRESS, text))
        await dispatcher.wait_idle(ADDRESS)
    return runtime, dispatcher


async def test_a_quiet_conversation_is_reviewed_into_memory(home_path: Path) -> None:
    home = review_home(home_path)
    user_md = home.user_profile_path
    user_md.write_text("Lives in Paris.\n")
    model = ScriptedModel(
        Reply("hi"),
        Reply("noted"),
        Reply(
            calls=[
                ("memory", {"target": "user", "action": "add", "content": "Prefers tea."}),
                (
                    "memory",
                    {
                        "target": "user",
                        "action": "replace",
                        "old_text": "Paris",
                        "content": "Lives in Lyon.",
                    },
                ),
                ("run_command", {"command": "echo sneaky"}),
            ]
        ),
        Reply("kept two notes"),
    )
    channel = RecordingChannel(answer="allow once")
    runtime, dispatcher = await chat(home, model, channel, ["I moved to Lyon", "and I prefer tea"])
    for _ in range(200):
        if not model.replies:
            break
        await asyncio.sleep(0.02)
    await dispatcher.shutdown()
    model.assert_complete()
    assert "Prefers tea." in user_md.read_text() and "Lives in Lyon." in user_md.read_text()
    assert len(channel.questions) == 1 and "Paris" in channel.questions[0]  # only the replace asked
    assert "every bot of this home" in channel.questions[0]  # the profile is shared: it says so
    [asked] = dispatcher.asks.settled  # on the dashboard's Waiting page too, while it waited
    assert "Paris" in asked.question and asked.outcome == "allow once (on test)"
    results = [m.content for m in model.requests[3].messages if m.role == "tool"]
    assert "a background review may use only" in results[2]
    assert "I moved to Lyon" in model.requests[2].messages[0].content  # the review read the chat
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation("test", "chat-1", user="u1", bot="atlas")
    assert len(await store.history(conversation.id)) == 4  # the review wrote nothing there
    await runtime.close()


async def test_a_declined_proposal_changes_nothing(home_path: Path) -> None:
    home = review_home(home_path)
    user_md = home.user_profile_path
    user_md.write_text("Lives in Paris.\n")
    model = ScriptedModel(
        Reply("hi"),
        Reply("ok"),
        Reply(calls=[("memory", {"target": "user", "action": "remove", "old_text": "Paris"})]),
        Reply("[NOTHING]"),
    )
    runtime, dispatcher = await chat(home, model, RecordingChannel(answer="deny"), ["a", "b"])
    for _ in range(200):
        if not model.replies:
            break
        await asyncio.sleep(0.02)
    await dispatcher.shutdown()
    await runtime.close()
    model.assert_complete()
    assert user_md.read_text() == "Lives in Paris.\n"


async def test_disabled_or_short_conversations_are_not_reviewed(
    home_path: Path, tmp_path: Path
) -> None:
    model = ScriptedModel(Reply("hi"))
    runtime, dispatcher = await chat(
        review_home(home_path, enabled=False), model, RecordingChannel(), ["hello"]
    )
    await asyncio.sleep(0.3)
    await dispatcher.shutdown()
    await runtime.close()
    model.assert_complete()  # no review request was made
    model = ScriptedModel(Reply("hi"))
    runtime, dispatcher = await chat(
        review_home(tmp_path / "other"), model, RecordingChannel(), ["one message"]
    )
    await asyncio.sleep(0.3)
    await dispatcher.shutdown()
    await runtime.close()
    assert len(model.requests) == 1  # one user message is not enough substance


async def test_the_reviews_limits_come_on_top_of_the_rules(home_path: Path) -> None:
    """A review may read, but never what the rules refuse: the vault, the home asked for."""
    import json

    from atlas.agent.review import ReviewGate
    from atlas.providers.base import ToolCall
    from atlas.trust.gate import Allow, Deny, settle
    from atlas.trust.policy import RuleGate
    from tests.helpers import run_context

    home = review_home(home_path)
    vault = home.root / "vault"
    vault.mkdir()
    (vault / "key.txt").write_text("s3cret")
    registry = default_registry()
    gate = ReviewGate(RuleGate(home, None, None))
    run = run_context(home, kind="bot")  # nobody to ask in a review

    async def judge(tool: str, **args: object) -> Allow | Deny:
        return await settle(gate, ToolCall("c1", tool, json.dumps(args)), registry.get(tool), run)

    async def refuse_to_be_asked(question: str, choices: list[str]) -> str:
        raise AssertionError(f"the review put a rule's question to the person: {question}")

    vault_read = await judge("read_file", path=str(vault / "key.txt"))
    assert isinstance(vault_read, Deny) and vault_read.rule == "files:vault"
    vault_search = await judge("find_files", pattern="s3cret", path=str(vault))
    assert isinstance(vault_search, Deny) and vault_search.rule == "files:vault"
    run.ask = refuse_to_be_asked
    settings = await judge("read_file", path=str(home.root / "config.toml"))
    assert isinstance(settings, Deny) and settings.rule == "home:files"
    assert "background review does not ask" in settings.reason
    assert isinstance(await judge("read_file", path="notes.md"), Allow)
    assert isinstance(await judge("run_command", command="ls"), Deny)  # the review's own limit
    added = await judge("memory", target="user", action="add", content="Likes tea.")
    assert isinstance(added, Allow)
