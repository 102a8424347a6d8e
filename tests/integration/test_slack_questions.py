"""ask_user on Slack: real slack-bolt and slack_sdk against the fake Slack (Web API + Socket
Mode) on 127.0.0.1; the tool reaches the channel through run.ask_questions, as the dispatcher
will bind it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.base import Address, AnsweredElsewhere, Question, QuestionOutcome
from atlas.home import Home
from atlas.outbox.rows import mark_delivered
from atlas.tools.ask import ask_user
from atlas.tools.registry import ToolResult
from tests.fakes.slack_server import Posted
from tests.helpers import BASE_CONFIG, make_home, run_context
from tests.integration.test_slack import (
    ALICE,
    DM,
    STRANGER,
    Harness,
    close_harness,
    make_harness,
)


@pytest.fixture
async def slack(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    h = await make_harness(home, monkeypatch)
    await h.fake.wait_connected()
    yield h
    await close_harness(h)


def run_ask(
    slack: Harness, arguments: dict[str, Any], *, home: Home | None = None, chat: str = DM
) -> asyncio.Task[ToolResult]:
    """ask_user in a conversation run bound to a Slack chat (settings from `home`)."""
    run = run_context(home or slack.home)
    run.channel = slack.channel.name
    address = Address("atlas", slack.channel.name, chat)
    run.ask_questions = lambda questions: slack.channel.ask_questions(  # type: ignore[attr-defined]
        address, questions
    )
    return asyncio.create_task(ask_user.invoke(run, arguments))


def ask(slack: Harness, *questions: Question) -> asyncio.Task[QuestionOutcome]:
    return asyncio.create_task(slack.channel.ask_questions(slack.address(), list(questions)))


async def questions_posted(slack: Harness, count: int) -> list[Posted]:
    await slack.fake.wait_for(lambda: len([p for p in slack.fake.posted if p.blocks]) >= count)
    return [p for p in slack.fake.posted if p.blocks]


def element(posted: Posted, label: str) -> dict[str, Any]:
    """The element of a question's message with this label ("Other" for the text input)."""
    for block in posted.blocks or []:
        if block["type"] == "input" and label == "Other":
            return block["element"]
        for item in block.get("elements", []):
            if item.get("text", {}).get("text") == label or item["type"] == label:
                return item
    raise AssertionError(f"no {label!r} in {json.dumps(posted.blocks)}")


async def interact(
    slack: Harness,
    posted: Posted,
    action: dict[str, Any],
    *,
    user: str = ALICE,
    state: dict[str, Any] | None = None,
) -> None:
    """Send a block_actions interaction as Slack does, and wait for its acknowledgement."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
        "api_app_id": "A0001",
        "token": "verification-token",
        "team": {"id": "T0001", "domain": "fake"},
        "container": {"type": "message", "message_ts": posted.ts, "channel_id": posted.channel},
        "channel": {"id": posted.channel, "name": "directmessage"},
        "message": {"ts": posted.ts, "text": posted.text},
        "trigger_id": "trigger",
        "actions": [{"action_ts": "1700000001.0", **action}],
    }
    if state is not None:
        payload["state"] = {"values": state}
    await slack.fake.wait_ack(await slack.fake.push_interactive(payload))


def click(posted: Posted, label: str) -> dict[str, Any]:
    button = element(posted, label)
    return {"type": "button", "action_id": button["action_id"], "value": button["value"]}


async def test_a_click_answers_and_a_strangers_click_is_ignored(slack: Harness) -> None:
    task = run_ask(
        slack, {"questions": [{"question": "Which database?", "choices": ["Postgres", "SQLite"]}]}
    )
    [posted] = await questions_posted(slack, 1)
    buttons = posted.blocks[1]["elements"]  # type: ignore[index]
    assert [b["text"]["text"] for b in buttons] == ["Postgres", "SQLite", "Cancel"]
    assert buttons[0]["style"] == "primary"  # the recommended choice
    assert len({b["action_id"] for b in buttons}) == 3
    assert posted.blocks[2]["type"] == "input" and posted.blocks[2]["dispatch_action"]  # type: ignore[index]

    await interact(slack, posted, click(posted, "SQLite"), user=STRANGER)
    await slack.fake.wait_for(lambda: len(slack.fake.ephemeral) == 1)
    assert slack.fake.ephemeral[0]["user"] == STRANGER
    assert not task.done() and not posted.edits

    await interact(slack, posted, click(posted, "SQLite"))
    result = await asyncio.wait_for(task, 5)
    assert result.text == "The user answered:\n1. Which database?\n   → SQLite"
    await slack.fake.wait_for(lambda: bool(posted.edits))
    shown = json.dumps(posted.edits[-1]["blocks"])
    assert "SQLite" in shown and f"<@{ALICE}>" in shown
    assert all(b["type"] not in ("actions", "input") for b in posted.edits[-1]["blocks"])


async def test_checkboxes_then_done_and_other_typed_in_the_input(slack: Harness) -> None:
    task = ask(
        slack,
        Question("Which features?", ("auth", "search", "billing"), multi_select=True),
        Question("Anything else?", ("no",)),
    )
    first, second = await questions_posted(slack, 2)
    boxes = element(first, "checkboxes")
    assert [o["text"]["text"] for o in boxes["options"]] == ["auth", "search", "billing"]

    def ticked(*values: str) -> dict[str, Any]:
        return {"type": "checkboxes", "action_id": boxes["action_id"],
                "selected_options": [{"value": v} for v in values]}  # fmt: skip

    await interact(slack, first, ticked("0"))
    await interact(slack, first, ticked("0", "2"))
    # Done reads the ticks from the message state Slack sends with it.
    state = {"b": {boxes["action_id"]: {"type": "checkboxes", **ticked("2")}}}
    await interact(slack, first, click(first, "Done"), state=state)

    other = element(second, "Other")
    typed = {"type": "plain_text_input", "action_id": other["action_id"], "value": "dark mode"}
    await interact(slack, second, typed)
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "submitted"
    assert [(a.chosen, a.other, a.by) for a in outcome.answers] == [
        (("billing",), "", ALICE),
        ((), "dark mode", ALICE),
    ]
    await slack.fake.wait_for(lambda: bool(second.edits))
    assert "dark mode" in second.edits[-1]["text"]


async def test_done_with_nothing_ticked_waits_for_a_choice(slack: Harness) -> None:
    task = ask(slack, Question("Pick some", ("a", "b"), multi_select=True))
    [posted] = await questions_posted(slack, 1)
    await interact(slack, posted, click(posted, "Done"))
    await slack.fake.wait_for(lambda: len(slack.fake.ephemeral) == 1)
    assert "Tick at least one" in slack.fake.ephemeral[0]["text"]
    assert not task.done()
    boxes = element(posted, "checkboxes")
    tick = {
        "type": "checkboxes",
        "action_id": boxes["action_id"],
        "selected_options": [{"value": "1"}],
    }
    await interact(slack, posted, tick)
    await interact(slack, posted, click(posted, "Done"))
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.answers[0].chosen == ("b",)


async def test_no_answer_in_time_is_timed_out_and_the_message_says_so(
    slack: Harness, tmp_path: Path
) -> None:
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[chat]\nask_user_timeout = 0.3\n"
    )
    impatient = make_home(tmp_path / "impatient", config=config)
    task = run_ask(
        slack, {"questions": [{"question": "Proceed?", "choices": ["yes"]}]}, home=impatient
    )
    [posted] = await questions_posted(slack, 1)
    result = await asyncio.wait_for(task, 5)
    assert result.text.startswith("Nobody answered within 0 s")
    await slack.fake.wait_for(lambda: bool(posted.edits))
    assert "No answer in time" in posted.edits[-1]["text"]


async def test_a_question_slack_refuses_is_undelivered(slack: Harness) -> None:
    result = await asyncio.wait_for(
        run_ask(slack, {"questions": [{"question": "Colour?"}]}, chat=""), 5
    )
    assert result.text.startswith("The questions could not be shown to the user")
    assert "channel_not_found" in result.text


async def test_cancel_closes_every_question(slack: Harness) -> None:
    task = ask(slack, Question("One?", ("a",)), Question("Two?", ("b",)))
    first, second = await questions_posted(slack, 2)
    await interact(slack, first, click(first, "Cancel"))
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "cancelled" and ALICE in outcome.detail
    await slack.fake.wait_for(lambda: bool(first.edits) and bool(second.edits))
    assert "cancelled by" in second.edits[-1]["text"]


# ---- a click counts only where the question was posted (issue 18, item 10) -----------------------

ELSEWHERE = "C0ELSEWHERE"


async def interact_elsewhere(
    slack: Harness,
    posted: Posted,
    action: dict[str, Any],
    *,
    channel: str = ELSEWHERE,
    ts: str = "",
) -> None:
    """A block_actions interaction whose message is in another channel (or is another message)."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": ALICE, "username": "alice", "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "fake"},
        "container": {"type": "message", "message_ts": ts or posted.ts, "channel_id": channel},
        "channel": {"id": channel, "name": "elsewhere"},
        "message": {"ts": ts or posted.ts, "text": posted.text},
        "actions": [{"action_ts": "1700000001.0", **action}],
    }
    await slack.fake.wait_ack(await slack.fake.push_interactive(payload))


async def test_an_approval_click_from_another_channel_is_refused(slack: Harness) -> None:
    waiting = asyncio.create_task(slack.channel.ask(slack.address(), "Deploy?", ["Yes", "No"]))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    posted = slack.fake.posted[0]
    await interact_elsewhere(slack, posted, click(posted, "Yes"))
    await interact_elsewhere(slack, posted, click(posted, "Yes"), channel=posted.channel, ts="1.2")
    await asyncio.sleep(0.05)
    assert not waiting.done() and not posted.edits
    await interact(slack, posted, click(posted, "No"))
    assert await asyncio.wait_for(waiting, 5) == "No"


async def test_an_ask_user_click_from_another_channel_is_refused(slack: Harness) -> None:
    task = ask(slack, Question("Which database?", ("Postgres", "SQLite")))
    [posted] = await questions_posted(slack, 1)
    await interact_elsewhere(slack, posted, click(posted, "SQLite"))
    await asyncio.sleep(0.05)
    assert not task.done() and not posted.edits
    await interact(slack, posted, click(posted, "SQLite"))
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "submitted"


async def test_in_a_conversation_of_one_person_only_they_or_an_owner_answer(
    slack: Harness,
) -> None:
    from atlas.channels.access import approve_pairing, request_pairing

    store = slack.channel.access.store
    for person in ("U0BOB", "U0CAROL"):
        pairing = await request_pairing(store, "atlas", "slack", person)
        assert pairing is not None
        await approve_pairing(store, pairing.code)
    address = Address("atlas", slack.channel.name, "C0TEAM", user="U0BOB")
    waiting = asyncio.create_task(slack.channel.ask(address, "Run it?", ["Yes", "No"]))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    posted = slack.fake.posted[0]
    await interact(slack, posted, click(posted, "Yes"), user="U0CAROL")
    await slack.fake.wait_for(lambda: len(slack.fake.ephemeral) == 1)
    assert "Only the person who asked" in slack.fake.ephemeral[0]["text"]
    assert not waiting.done()
    await interact(slack, posted, click(posted, "No"), user="U0BOB")
    assert await asyncio.wait_for(waiting, 5) == "No"


# ---- a wait cancelled while its question is being posted still closes it -------------------------

NO_ANSWER_IN_TIME = None  # a plain cancel: a timeout or /stop


async def question_rows(slack: Harness) -> list[tuple[str, str | None]]:
    """(state, platform_id) of the bot's question rows in the outbox."""
    db = await slack.dispatcher.outbox.database("atlas")
    return await db.quick(
        lambda conn: [
            tuple(r)
            for r in conn.execute(
                "SELECT state, platform_id FROM outbox WHERE kind = 'question' ORDER BY id"
            )
        ]
    )


async def cancel_while_posted(
    slack: Harness,
    waiting: asyncio.Task[Any],
    reason: AnsweredElsewhere | None,
    answer: asyncio.Event,
) -> Posted:
    """With chat.postMessage held (carried out, its `answer` not yet back), cancel the wait,
    then let the answer through: the cancel still ends the wait. The question's message."""
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    waiting.cancel(reason)
    await asyncio.sleep(0)  # the cancel lands while the post waits for its answer
    assert not waiting.done()
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    return slack.fake.posted[0]


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (NO_ANSWER_IN_TIME, "No answer in time"),
        (AnsweredElsewhere(("Deny",)), "Deny (on the dashboard)"),
    ],
)
async def test_an_approval_cancelled_while_it_is_posted_is_closed(
    slack: Harness, reason: AnsweredElsewhere | None, shown: str
) -> None:
    gate = slack.fake.hold("chat.postMessage")
    waiting = asyncio.create_task(slack.channel.ask(slack.address(), "Proceed?", ["Allow", "Deny"]))
    posted = await cancel_while_posted(slack, waiting, reason, gate)
    await slack.fake.wait_for(lambda: bool(posted.edits), timeout=5)
    assert shown in posted.edits[-1]["text"]
    assert all(b["type"] != "actions" for b in posted.edits[-1]["blocks"])  # no live buttons
    assert await question_rows(slack) == [("delivered", posted.ts)]


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (NO_ANSWER_IN_TIME, "No answer in time"),
        (AnsweredElsewhere(("SQLite", "atlas")), "SQLite (on the dashboard)"),
    ],
)
async def test_questions_cancelled_while_the_first_is_posted_are_closed(
    slack: Harness, reason: AnsweredElsewhere | None, shown: str
) -> None:
    gate = slack.fake.hold("chat.postMessage")
    waiting = ask(slack, Question("Which database?", ("Postgres", "SQLite")), Question("Name?"))
    posted = await cancel_while_posted(slack, waiting, reason, gate)
    await slack.fake.wait_for(lambda: bool(posted.edits), timeout=5)
    assert shown in posted.edits[-1]["text"]
    assert all(b["type"] not in ("actions", "input") for b in posted.edits[-1]["blocks"])
    assert len(slack.fake.posted) == 1  # the second question was never put
    assert await question_rows(slack) == [("delivered", posted.ts)]


async def test_an_approval_cancelled_while_its_row_is_marked_is_closed(
    slack: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The post came back and its outbox row is being marked delivered when the wait is
    cancelled (the cancel lands in the database call's await): closed all the same."""
    waiting: asyncio.Task[str | None] | None = None

    def cancelled_while_marking(*args: Any) -> None:
        mark_delivered(*args)
        assert waiting is not None
        waiting.cancel()

    monkeypatch.setattr("atlas.outbox.engine.mark_delivered", cancelled_while_marking)
    waiting = asyncio.create_task(slack.channel.ask(slack.address(), "Proceed?", ["Allow"]))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    [posted] = slack.fake.posted
    await slack.fake.wait_for(lambda: bool(posted.edits), timeout=5)
    assert "No answer in time" in posted.edits[-1]["text"]
    assert await question_rows(slack) == [("delivered", posted.ts)]
