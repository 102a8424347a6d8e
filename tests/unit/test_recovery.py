"""Turns cut short by a crash: resumed at start when recent, else the person is told once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.outbox.notes import EARLIER_REPLY
from atlas.outbox.rows import Outgoing, mark_sending
from atlas.providers.base import Message, ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.recovery import (
    MAYBE_LOST,
    RESUME_NOTICE,
    TOLD,
    find_unfinished,
    resume_interrupted_turns,
)
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.recording_channel import RecordingChannel

CHANNEL = "telegram:atlas"
# As if the daemon restarted after everything a test stores (a crash came before).
RESTARTED = datetime.now(UTC) + timedelta(hours=3)


def address(chat: str) -> Address:
    return Address("atlas", CHANNEL, chat)


async def setup(home: Home, *replies: Reply) -> tuple[Runtime, Dispatcher, RecordingChannel]:
    runtime = Runtime(home, model=ScriptedModel(*replies), registry=ToolRegistry())
    channel = RecordingChannel(CHANNEL)
    return runtime, Dispatcher(runtime, {CHANNEL: channel}), channel


async def conversation_with(runtime: Runtime, home: Home, chat: str, *messages: Message) -> int:
    """A conversation left as a crash would leave it: these messages stored, nothing after."""
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation(CHANNEL, chat, bot="atlas")
    for message in messages:
        await store.append(conversation.id, message)
    return conversation.id


async def answered_not_sent(
    runtime: Runtime, home: Home, chat: str, question: str, answer: str
) -> tuple[int, int]:
    """A question and its final answer stored with its outbox row, the answer never sent:
    (conversation, the answer's row)."""
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation(CHANNEL, chat, bot="atlas")
    asked = await store.append(conversation.id, Message("user", question))
    outgoing = Outgoing(address(chat), answer)
    answer_id = await store.append(
        conversation.id, Message("assistant", answer), answers_upto=asked, also=outgoing
    )
    assert answer_id is not None
    return conversation.id, outgoing.rows[0].id


async def roles(runtime: Runtime, home: Home, conversation_id: int) -> list[tuple[str, str]]:
    store = await runtime.store(home.bot(None))
    return [(m.role, m.content) for m in await store.history(conversation_id)]


async def test_only_conversations_without_a_final_answer_are_unfinished(home: Home) -> None:
    runtime, _, _ = await setup(home)
    call = ToolCall("c1", "read_file", '{"path": "a"}')
    waiting = await conversation_with(runtime, home, "1", Message("user", "hi"))
    mid_tool = await conversation_with(
        runtime,
        home,
        "2",
        Message("user", "read it"),
        Message("assistant", "", tool_calls=[call]),
        Message("tool", "text", tool_call_id="c1", name="read_file"),
    )
    await conversation_with(runtime, home, "3", Message("user", "hi"), Message("assistant", "yo"))
    store = await runtime.store(home.bot(None))
    since = datetime.now(UTC) - timedelta(hours=1)
    found = await find_unfinished(store, "atlas", since=since)
    assert sorted(item.conversation_id for item in found) == sorted([waiting, mid_tool])
    assert {item.address for item in found} == {address("1"), address("2")}
    assert await find_unfinished(store, "atlas", since=datetime.now(UTC) + timedelta(hours=1)) == []
    await runtime.close()


async def test_a_recent_interrupted_turn_is_run_and_answered(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home, Reply("the answer"))
    conversation_id = await conversation_with(runtime, home, "1", Message("user", "question?"))
    report = await resume_interrupted_turns(dispatcher, started_at=RESTARTED)
    assert [item.conversation_id for item in report.resumed] == [conversation_id]
    await dispatcher.wait_idle(address("1"))
    assert channel.sent == [(address("1"), "the answer")]
    assert await roles(runtime, home, conversation_id) == [
        ("user", "question?"),
        ("user", f"[notice] {RESUME_NOTICE}"),
        ("assistant", "the answer"),
    ]
    # Finished now: a second start finds nothing to do.
    again = await resume_interrupted_turns(dispatcher, started_at=RESTARTED)
    assert (again.resumed, again.told) == ([], [])
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_old_interrupted_turn_is_reported_once_not_run(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home)  # no model answer: none may be asked
    conversation_id = await conversation_with(runtime, home, "1", Message("user", "question?"))
    later = datetime.now(UTC) + timedelta(hours=1)
    report = await resume_interrupted_turns(dispatcher, now=later, started_at=RESTARTED)
    assert [item.conversation_id for item in report.told] == [conversation_id]
    assert channel.sent == [(address("1"), TOLD)]
    assert (await roles(runtime, home, conversation_id))[-1] == ("assistant", TOLD)
    assert (await resume_interrupted_turns(dispatcher, now=later, started_at=RESTARTED)).told == []
    assert len(channel.sent) == 1
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_turn_already_resumed_once_is_reported_instead_of_run_again(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home)
    conversation_id = await conversation_with(
        runtime,
        home,
        "1",
        Message("user", "crashes the daemon"),
        Message("user", f"[notice] {RESUME_NOTICE}"),
    )
    report = await resume_interrupted_turns(dispatcher, started_at=RESTARTED)
    assert [item.conversation_id for item in report.told] == [conversation_id]
    assert report.resumed == []
    assert channel.sent == [(address("1"), TOLD)]
    await dispatcher.shutdown()
    await runtime.close()


async def test_other_kinds_and_stopped_channels_are_left_alone(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home)
    store = await runtime.store(home.bot(None))
    routine = await store.conversation("routine", "r:1", kind="routine", bot="atlas")
    await store.append(routine.id, Message("user", "routine prompt"))
    # A channel this process does not run (console turns: tests/unit/test_recovery_console.py).
    stopped = await store.conversation("slack:atlas", "c", bot="atlas")
    await store.append(stopped.id, Message("user", "typed"))
    report = await resume_interrupted_turns(dispatcher, started_at=RESTARTED)
    assert (report.resumed, report.told) == ([], [])
    assert [item.conversation_id for item, _ in report.skipped] == [stopped.id]
    assert channel.sent == []
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_undeliverable_report_is_tried_again_at_the_next_start(home: Home) -> None:
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    down = RecordingChannel(CHANNEL, fail_with="telegram is down")
    dispatcher = Dispatcher(runtime, {CHANNEL: down})
    conversation_id = await conversation_with(runtime, home, "1", Message("user", "q"))
    later = datetime.now(UTC) + timedelta(hours=1)
    report = await resume_interrupted_turns(dispatcher, now=later, started_at=RESTARTED)
    assert report.told == [] and len(report.skipped) == 1
    assert "telegram is down" in report.skipped[0][1]
    # Kept as an answer owed (stored before sending), so it is sent once, not told again.
    assert (await roles(runtime, home, conversation_id))[-1] == ("assistant", TOLD)
    down.fail_with = None
    again = await resume_interrupted_turns(dispatcher, now=later, started_at=RESTARTED)
    assert len(again.outbox.queued) == 1 and again.told == []
    await dispatcher.outbox.drained()
    assert [text for _, text in down.sent] == [TOLD]
    third = await resume_interrupted_turns(dispatcher, now=later, started_at=RESTARTED)
    assert (third.outbox.queued, third.told) == ([], [])
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_message_stored_since_the_restart_is_left_to_its_own_turn(home: Home) -> None:
    # A message arriving as the channels start is stored and its lane runs: resuming the
    # conversation as well would answer it twice (found by scripts/crash_test.py).
    runtime, dispatcher, channel = await setup(home)
    before = datetime.now(UTC)
    await conversation_with(runtime, home, "1", Message("user", "arrived after the restart"))
    report = await resume_interrupted_turns(dispatcher, started_at=before)
    assert (report.resumed, report.told, report.skipped) == ([], [], [])
    assert channel.sent == []
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_message_arriving_between_the_scan_and_the_resume_wins(home: Home) -> None:
    # The live message was stored after recovery looked but before its notice: the notice is
    # dropped in the same transaction that would store it, so only the message's own turn
    # runs (a duplicate answer otherwise, found by crash_test.py seed 21).
    from atlas.dispatch import Inbound

    runtime, dispatcher, _ = await setup(home)  # no model answer: a turn would fail the test
    conversation_id = await conversation_with(runtime, home, "1", Message("user", "before"))
    store = await runtime.store(home.bot(None))
    [item] = await find_unfinished(store, "atlas", since=datetime.now(UTC) - timedelta(hours=1))
    await store.append(conversation_id, Message("user", "arrived as the channels started"))
    notice = Inbound(item.address, RESUME_NOTICE, kind="notice", unless_newer_than=item.last_id)
    assert not await dispatcher.submit(notice)
    assert not dispatcher.has_lane(item.address)
    assert [text for _, text in await roles(runtime, home, conversation_id)] == [
        "before",
        "arrived as the channels started",
    ]
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_conversation_already_running_again_is_not_resumed_twice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """If the conversation's lane woke as the channels started (a message raced the check), a
    resume notice would start a second turn answering the same message: none is sent."""
    from datetime import UTC, datetime, timedelta

    from atlas.channels.base import Address
    from atlas.dispatch import Dispatcher
    from atlas.providers.base import Message
    from atlas.providers.scripted import ScriptedModel
    from atlas.recovery import resume_interrupted_turns
    from atlas.runtime import Runtime
    from atlas.tools.registry import ToolRegistry
    from tests.helpers import make_home

    home = make_home(tmp_path / "home")
    model = ScriptedModel()  # any model call would fail the test
    runtime = Runtime(home, model=model, registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    address = Address("atlas", "test", "c1")
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation("test", "c1", bot="atlas")
    await store.append(conversation.id, Message("user", "cut short by a crash"))
    dispatcher._lane(address, conversation.id, "conversation")
    report = await resume_interrupted_turns(
        dispatcher, started_at=datetime.now(UTC) + timedelta(seconds=1)
    )
    assert report.resumed == [] and report.told == [] and model.requests == []
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_answer_stored_but_never_sent_is_sent_once(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home)
    await answered_not_sent(runtime, home, "9", "what time is it?", "Noon.")
    first = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert [text for _, text in channel.sent] == ["Noon."]
    assert len(first.outbox.queued) == 1 and first.resumed == [] and first.told == []
    again = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert again.outbox.queued == [] and [text for _, text in channel.sent] == ["Noon."]
    await dispatcher.shutdown()
    await runtime.close()


async def test_a_message_that_came_in_during_the_last_turn_is_answered(home: Home) -> None:
    runtime, dispatcher, channel = await setup(home, Reply("About the second one: yes."))
    store = await runtime.store(home.bot(None))
    conversation = await store.conversation(CHANNEL, "10", bot="atlas")
    first = await store.append(conversation.id, Message("user", "first question"))
    await store.append(conversation.id, Message("user", "second, sent mid-turn"))
    # Delivered: stored without a row left to send.
    await store.append(
        conversation.id, Message("assistant", "About the first."), answers_upto=first
    )
    report = await resume_interrupted_turns(
        dispatcher, started_at=RESTARTED, now=RESTARTED - timedelta(hours=3)
    )
    assert len(report.resumed) == 1 and report.outbox.queued == []
    await dispatcher.wait_idle(address("10"))
    assert [text for _, text in channel.sent] == ["About the second one: yes."]
    await dispatcher.shutdown()
    await runtime.close()


async def test_the_dispatcher_marks_what_it_delivered(home: Home) -> None:
    from atlas.dispatch import Inbound

    runtime, dispatcher, channel = await setup(home, Reply("hello"))
    await dispatcher.submit(Inbound(address("11"), "hi"))
    await dispatcher.wait_idle(address("11"))
    report = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert report.outbox.queued == [] and [text for _, text in channel.sent] == ["hello"]
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_answer_whose_sending_began_is_never_sent_again(home: Home) -> None:
    # Killed while the platform had it: it may have arrived, and Telegram takes no
    # idempotency key, so the person is told instead (at most once, found by crash_test.py).
    runtime, dispatcher, channel = await setup(home)
    conversation_id, row = await answered_not_sent(runtime, home, "12", "time?", "Noon.")
    store = await runtime.store(home.bot(None))
    await store.db.quick(lambda db: mark_sending(db, row))  # then the process died
    first = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert [text for _, text in channel.sent] == [MAYBE_LOST]
    assert [r.id for r in first.outbox.maybe] == [row] and first.outbox.queued == []
    assert (await roles(runtime, home, conversation_id))[-1] == ("assistant", MAYBE_LOST)
    again = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert (again.outbox.queued, again.outbox.maybe, again.told) == ([], [], [])
    assert len(channel.sent) == 1
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_owed_answer_is_sent_even_when_a_new_message_came_in_first(home: Home) -> None:
    # The restarted channel stored the person's next message before recovery ran: the old
    # answer is still owed (found by crash_test.py), and the new message is left to its lane.
    runtime, dispatcher, channel = await setup(home)
    conversation_id, _ = await answered_not_sent(runtime, home, "13", "first", "First answer.")
    started_at = datetime.now(UTC)
    store = await runtime.store(home.bot(None))
    await store.append(conversation_id, Message("user", "second, after the restart"))
    report = await resume_interrupted_turns(dispatcher, started_at=started_at)
    await dispatcher.outbox.drained()
    assert [text for _, text in channel.sent] == ["First answer."]
    assert len(report.outbox.queued) == 1 and (report.resumed, report.told) == ([], [])
    await dispatcher.shutdown()
    await runtime.close()


async def test_an_answer_the_platform_refused_is_sent_at_the_next_start(home: Home) -> None:
    from atlas.dispatch import Inbound

    runtime = Runtime(home, model=ScriptedModel(Reply("later")), registry=ToolRegistry())
    down = RecordingChannel(CHANNEL, fail_with="telegram is down")
    dispatcher = Dispatcher(runtime, {CHANNEL: down})
    await dispatcher.submit(Inbound(address("14"), "hi"))
    await dispatcher.wait_idle(address("14"))
    assert down.sent == []
    down.fail_with = None  # refused, so certainly not arrived: sent, not "maybe lost"
    report = await resume_interrupted_turns(dispatcher, started_at=RESTARTED, now=RESTARTED)
    await dispatcher.outbox.drained()
    assert len(report.outbox.queued) == 1 and report.outbox.maybe == []
    assert [text for _, text in down.sent] == [f"{EARLIER_REPLY}\n\nlater"]
    await dispatcher.shutdown()
    await runtime.close()
