"""The dispatcher: stored first, no duplicates, one turn at a time, /stop, notices, outages."""

from __future__ import annotations

import asyncio
from pathlib import Path

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.errors import ProviderError
from atlas.providers.base import ProviderCallError
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.recording_channel import RecordingChannel


class FailingModel(ScriptedModel):
    async def complete(self, request, *, fallback=None, on_text=None):  # type: ignore[no-untyped-def]
        raise ProviderError("fake/test-model failed: 503 overloaded")


def make(home, model) -> tuple[Runtime, Dispatcher, RecordingChannel]:  # type: ignore[no-untyped-def]
    runtime = Runtime(home, model=model, registry=ToolRegistry())
    channel = RecordingChannel()
    return runtime, Dispatcher(runtime, {"test": channel}), channel


ADDRESS = Address("atlas", "test", "chat-1", user="u1")


async def stored_texts(runtime: Runtime, home) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation("test", "chat-1", user="u1", bot="atlas")
    return [(m.role, m.content) for m in await store.history(conversation.id)]


async def test_message_is_stored_and_answered(home) -> None:
    model = ScriptedModel(Reply("hello back"))
    runtime, dispatcher, channel = make(home, model)
    assert await dispatcher.submit(Inbound(ADDRESS, "hello", event_id="e1"))
    await dispatcher.wait_idle(ADDRESS)
    assert channel.sent == [(ADDRESS, "hello back")]
    assert await stored_texts(runtime, home) == [("user", "hello"), ("assistant", "hello back")]
    await dispatcher.shutdown()
    await runtime.close()


async def test_duplicate_event_is_dropped(home) -> None:
    model = ScriptedModel(Reply("once"))
    runtime, dispatcher, channel = make(home, model)
    assert await dispatcher.submit(Inbound(ADDRESS, "hi", event_id="e1"))
    assert not await dispatcher.submit(Inbound(ADDRESS, "hi", event_id="e1"))
    await dispatcher.wait_idle(ADDRESS)
    assert [t for _, t in channel.sent] == ["once"]
    model.assert_complete()
    await dispatcher.shutdown()
    await runtime.close()


async def test_inbound_is_stored_before_the_turn_and_survives_an_outage(home) -> None:
    runtime, dispatcher, channel = make(home, FailingModel())
    await dispatcher.submit(Inbound(ADDRESS, "are you there?"))
    await dispatcher.wait_idle(ADDRESS)
    assert channel.sent[0][1].startswith("Sorry, I could not answer: fake/test-model failed")
    assert await stored_texts(runtime, home) == [("user", "are you there?")]
    await dispatcher.shutdown()
    await runtime.close()


async def test_messages_mid_turn_are_queued_into_one_next_turn(home) -> None:
    release = asyncio.Event()
    model = ScriptedModel(Reply("first", wait_for=release), Reply("second"))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "one"))
    await asyncio.sleep(0.05)
    await dispatcher.submit(Inbound(ADDRESS, "two"))
    await dispatcher.submit(Inbound(ADDRESS, "three"))
    release.set()
    await dispatcher.wait_idle(ADDRESS)
    model.assert_complete()
    assert [t for _, t in channel.sent] == ["first", "second"]
    second_request = [m.content for m in model.requests[1].messages if m.role == "user"]
    assert second_request == ["one", "two", "three"]
    await dispatcher.shutdown()
    await runtime.close()


async def test_conversations_run_concurrently(home) -> None:
    release = asyncio.Event()
    model = ScriptedModel(Reply("a", wait_for=release), Reply("b", wait_for=release))
    runtime, dispatcher, channel = make(home, model)
    other = Address("atlas", "test", "chat-2", user="u2")
    await dispatcher.submit(Inbound(ADDRESS, "x"))
    await dispatcher.submit(Inbound(other, "y"))
    for _ in range(50):
        if len(model.requests) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(model.requests) == 2  # both turns are in the model at once
    release.set()
    await dispatcher.wait_idle(ADDRESS)
    await dispatcher.wait_idle(other)
    assert sorted(t for _, t in channel.sent) == ["a", "b"]
    await dispatcher.shutdown()
    await runtime.close()


async def test_stop_cancels_the_running_turn(home) -> None:
    never = asyncio.Event()
    model = ScriptedModel(Reply("too late", wait_for=never), Reply("fresh"))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "long job"))
    await asyncio.sleep(0.05)
    await dispatcher.submit(Inbound(ADDRESS, "/stop"))
    await dispatcher.wait_idle(ADDRESS)
    assert [t for _, t in channel.sent] == ["Stopped."]  # once, not from both sides
    await dispatcher.submit(Inbound(ADDRESS, "next"))
    await dispatcher.wait_idle(ADDRESS)
    assert channel.sent[-1][1] == "fresh"
    assert ("user", "/stop") not in await stored_texts(runtime, home)
    await dispatcher.shutdown()
    await runtime.close()


async def test_notice_starts_a_turn(home) -> None:
    model = ScriptedModel(Reply("noted"))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "job 7 finished", kind="notice"))
    await dispatcher.wait_idle(ADDRESS)
    assert model.requests[0].messages[-1].content == "[notice] job 7 finished"
    assert channel.sent[-1][1] == "noted"
    await dispatcher.shutdown()
    await runtime.close()


async def test_provider_call_error_reaches_user_as_error(home) -> None:
    model = ScriptedModel(Reply(error=ProviderCallError("boom", retryable=False)))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "hi"))
    await dispatcher.wait_idle(ADDRESS)
    assert "boom" in channel.sent[-1][1]
    await dispatcher.shutdown()
    await runtime.close()


async def test_mode_command_sets_the_conversations_gate_mode(home) -> None:
    runtime, dispatcher, channel = make(home, ScriptedModel())
    await dispatcher.submit(Inbound(ADDRESS, "/mode"))
    assert "Mode: ask (the bot's)" in channel.sent[-1][1]
    await dispatcher.submit(Inbound(ADDRESS, "/mode read-only"))
    assert channel.sent[-1][1] == "Mode for this conversation: read-only."
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation("test", "chat-1", user="u1", bot="atlas")
    assert runtime.state(home.bot(None), conversation.id).mode == "read-only"
    assert await store.history(conversation.id) == []  # commands are not messages
    await dispatcher.shutdown()
    await runtime.close()


async def test_detached_run_has_its_own_conversation_and_nobody_to_ask(home) -> None:
    model = ScriptedModel(Reply("report ready"), Reply("late", wait_for=asyncio.Event()))
    runtime, dispatcher, channel = make(home, model)
    result = await dispatcher.run_detached(
        "atlas", "write the report", run_kind="routine", chat="r1"
    )
    assert result.error is None and result.outcome.text == "report ready"
    assert channel.sent == []  # nothing is sent by a detached run itself
    store = await runtime.store(home.bot(None))
    conversation = await store.get_conversation(result.conversation_id)
    assert conversation.kind == "routine" and conversation.chat == "r1"
    stuck = await dispatcher.run_detached(
        "atlas", "hang", run_kind="routine", chat="r2", time_limit=0.1
    )
    assert stuck.outcome is None and "time limit" in stuck.error
    assert await dispatcher.deliver(ADDRESS, "done") is None and channel.sent[-1][1] == "done"
    assert "no channel" in await dispatcher.deliver(Address("atlas", "nowhere", "x"), "lost")
    await dispatcher.shutdown()
    await runtime.close()


async def test_status_shows_model_context_and_pending_approvals(home) -> None:
    model = ScriptedModel(Reply("hello back"))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "hello"))
    await dispatcher.wait_idle(ADDRESS)
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation("test", "chat-1", user="u1", bot="atlas")
    runtime.state(home.bot(None), conversation.id).pending_asks.append(
        "run_command: `gh pr create`?"
    )
    await dispatcher.submit(Inbound(ADDRESS, "/status"))
    status = channel.sent[-1][1]
    assert "model fake/test-model" in status
    assert "of 128,000 tokens" in status and "2 messages in view" in status
    assert "Approvals waiting: 1" in status and "gh pr create" in status
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_tool_can_attach_a_file_to_the_reply(home) -> None:
    from atlas.tools.attach import ATTACH_TOOLS

    class FileChannel(RecordingChannel):
        def __init__(self) -> None:
            super().__init__()
            self.files: list[Path] = []

        async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
            await super().send(address, text, files)
            self.files.extend(files or [])

    report = home.bot(None).workspace / "report.csv"
    report.write_text("a,b\n1,2\n")
    model = ScriptedModel(
        Reply(
            calls=[
                ("attach_file", {"path": "report.csv"}),
                ("attach_file", {"path": "missing.csv"}),
            ]
        ),
        Reply("Here is the report."),
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry(ATTACH_TOOLS))
    channel = FileChannel()
    dispatcher = Dispatcher(runtime, {"test": channel})
    await dispatcher.submit(Inbound(ADDRESS, "send me the report"))
    await dispatcher.wait_idle(ADDRESS)
    assert channel.sent[-1][1] == "Here is the report."
    [sent] = channel.files  # a checked copy of the file (atlas/tools/attach.py)
    assert sent.name == "report.csv" and sent.read_bytes() == report.read_bytes()
    missing = model.requests[1].messages[-1].content
    assert missing.startswith("Error:") and "not a file" in missing
    await dispatcher.shutdown()
    await runtime.close()


async def test_ask_user_reaches_the_channel_through_the_dispatcher(home) -> None:
    from atlas.channels.base import Answer, QuestionOutcome
    from atlas.tools.ask import ASK_TOOLS

    class QuestionChannel(RecordingChannel):
        async def ask_questions(self, address, questions):  # type: ignore[no-untyped-def]
            self.asked = questions
            return QuestionOutcome("submitted", [Answer((questions[0].choices[1],), None, "u1")])

    model = ScriptedModel(
        Reply(
            calls=[
                (
                    "ask_user",
                    {"questions": [{"question": "Which color?", "choices": ["red", "blue"]}]},
                )
            ]
        ),
        Reply("Blue it is."),
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry(ASK_TOOLS))
    channel = QuestionChannel()
    dispatcher = Dispatcher(runtime, {"test": channel})
    await dispatcher.submit(Inbound(ADDRESS, "paint it"))
    await dispatcher.wait_idle(ADDRESS)
    assert channel.asked[0].text == "Which color?"
    result = model.requests[1].messages[-1].content
    assert "The user answered" in result and "blue" in result
    assert channel.sent[-1][1] == "Blue it is."
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_wake_for_a_message_the_turn_already_saw_runs_no_second_turn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A message stored while its lane waited for a turn slot is in that turn's history: the
    wake-up it left must not answer it again (found by scripts/crash_test.py as a duplicate)."""
    from tests.helpers import BASE_CONFIG, make_home

    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        "[limits]\n", "[limits]\nconcurrent_turns = 1\n"
    )
    home = make_home(tmp_path / "home", config=config)
    busy = asyncio.Event()
    model = ScriptedModel(
        Reply("other chat", wait_for=busy), Reply("both answered"), Reply("answered again")
    )
    runtime, dispatcher, channel = make(home, model)
    other = Address("atlas", "test", "chat-2", user="u2")
    await dispatcher.submit(Inbound(other, "hold the only slot"))
    await asyncio.sleep(0.05)
    await dispatcher.submit(Inbound(ADDRESS, "first"))
    await asyncio.sleep(0.05)  # its lane now waits for the slot, its wake-up taken
    await dispatcher.submit(Inbound(ADDRESS, "second"))
    busy.set()
    await dispatcher.wait_idle(ADDRESS)
    await asyncio.sleep(0.05)
    users = [m.content for m in model.requests[1].messages if m.role == "user"]
    assert users == ["first", "second"]  # the set-up this test is about
    assert [t for a, t in channel.sent if a == ADDRESS] == ["both answered"]
    assert len(model.requests) == 2
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_turn_whose_node_lost_the_bot_stores_and_sends_nothing(home) -> None:
    """A node of a home on PostgreSQL (atlas/cluster/home_node.py) lost the bot's lease while
    its turn waited on the model: the answer is not stored (the next owner's recovery answers
    the message) and nothing goes out, not even a "something went wrong"."""
    from atlas.outbox.engine import StaleEpoch

    release = asyncio.Event()
    model = ScriptedModel(Reply("too late", wait_for=release))
    runtime, dispatcher, channel = make(home, model)
    held = {"atlas": True}

    def epoch_of(bot: str) -> int:
        if not held[bot]:
            raise StaleEpoch(f"outbox of bot {bot}: not held here")
        return 1

    dispatcher.holds = lambda bot: held[bot]
    dispatcher.outbox.claim_with(epoch_of)
    await dispatcher.submit(Inbound(ADDRESS, "hello", event_id="e1"))
    await asyncio.sleep(0.05)
    held["atlas"] = False  # the lease is gone while the model answers
    release.set()
    await dispatcher.wait_idle(ADDRESS)
    assert channel.sent == []
    assert await stored_texts(runtime, home) == [("user", "hello")]
    await dispatcher.shutdown()
    await runtime.close()


async def test_forgetting_a_bot_cancels_its_turns_without_a_word(home) -> None:
    release = asyncio.Event()
    model = ScriptedModel(Reply("never", wait_for=release))
    runtime, dispatcher, channel = make(home, model)
    await dispatcher.submit(Inbound(ADDRESS, "hello", event_id="e1"))
    await asyncio.sleep(0.05)
    assert dispatcher.has_lane(ADDRESS)
    await dispatcher.forget_bot("atlas", "node n1 lost its lease")
    assert not dispatcher.has_lane(ADDRESS)
    release.set()
    await asyncio.sleep(0.05)
    assert channel.sent == []  # no "Stopped.": the bot's next owner answers
    assert await stored_texts(runtime, home) == [("user", "hello")]
    await dispatcher.shutdown()
    await runtime.close()
