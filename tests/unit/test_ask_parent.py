"""ask_parent: a subagent's question reaches the conversation that started it as a notice, that
conversation's turn answers (itself, or after asking the person with ask_user) through
delegate action=answer, and the subagent goes on with the answer; a timeout, a parent that
cannot answer and a run that is not a subagent's end in "no answer" or an error saying why.
Everything runs through the dispatcher with scripted models, as a model's calls do."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.agents.services import provide_services
from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.scripted import Reply
from atlas.runtime import Runtime
from atlas.tools.ask_parent import ask_parent
from atlas.tools.catalog import default_registry
from atlas.tools.delegate import DELEGATE_TOOLS
from atlas.tools.registry import RunKind
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "test", "chat-1", user="u1")
CONFIG = (
    BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    + "\n[review]\nenabled = false\n"
    + "\n[agents]\nask_parent_seconds = {seconds}\n"
).replace("[limits]\n", "[limits]\nconcurrent_turns = {turns}\n")
SUB = "sa-test"
QUESTION = "q-test"


class AskingChannel(RecordingChannel):
    """A chat whose person answers ask_user's questions with `choice`."""

    def __init__(self, choice: str) -> None:
        super().__init__("test")
        self.choice = choice
        self.asked: list[list[Question]] = []

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        self.asked.append(questions)
        return QuestionOutcome("submitted", tuple(Answer((self.choice,)) for _ in questions))


class Setup:
    def __init__(self, home, model: ConversationModel, channel: RecordingChannel) -> None:  # type: ignore[no-untyped-def]
        self.home = home
        self.runtime = Runtime(home, model=model, registry=default_registry())
        self.channel = channel
        self.dispatcher = Dispatcher(self.runtime, {"test": channel})
        self.services = provide_services(self.dispatcher)

    async def close(self) -> None:
        await self.services.close()
        await self.dispatcher.shutdown()
        await self.runtime.close()


@pytest.fixture(autouse=True)
def known_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subagent's and its question's ids, so that the parent's script can name them."""
    monkeypatch.setattr("atlas.agents.subagents.new_id", lambda prefix: f"{prefix}-test")


def home_with(tmp_path: Path, seconds: float = 30, turns: int = 1):  # type: ignore[no-untyped-def]
    """By default one turn at a time in the whole home: a subagent that asks must lend its
    slot, or its parent's turn could never run to answer."""
    return make_home(tmp_path / "home", config=CONFIG.format(seconds=seconds, turns=turns))


def spawn(goal: str) -> Reply:
    return Reply(calls=[("delegate", {"tasks": [{"goal": goal, "context": "for the offsite"}]})])


def answer(message: str) -> Reply:
    arguments = {"action": "answer", "subagent_id": SUB, "message": message}
    return Reply(calls=[("delegate", arguments)])


def ask(question: str) -> Reply:
    return Reply(calls=[("ask_parent", {"question": question})])


def last_message(model: ConversationModel, marker: str, request: int) -> str:
    return model.requests(marker)[request].messages[-1].content


async def test_the_parent_answers_and_the_subagent_goes_on(tmp_path: Path) -> None:
    model = ConversationModel(
        {
            "plan the offsite": [
                spawn("find a venue"),
                Reply("A subagent is looking."),
                answer("Lisbon, 40 people"),  # the turn the question's notice starts
                Reply("I answered the subagent."),
                Reply("Hotel Tejo is booked."),  # the turn the result's notice starts
            ],
            "find a venue": [
                ask("Which city, and for how many people?"),
                Reply("Hotel Tejo in Lisbon seats 40."),
            ],
        }
    )
    s = Setup(home_with(tmp_path), model, RecordingChannel("test"))
    listed: list[tuple[str, str, Address, str]] = []  # what the Waiting page lists, each change
    asks = s.dispatcher.asks
    asks.listen(lambda: listed.extend((p.kind, p.asker, p.address, p.title) for p in asks.open()))
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "plan the offsite"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 3, what="the result's turn")
        await s.dispatcher.wait_idle(ADDRESS)
        # The question was on the Waiting page while it waited, and closed with who answered.
        question = "Which city, and for how many people?"
        assert listed == [("subagent", f"subagent {SUB}", ADDRESS, question)]
        assert (
            not asks.open() and asks.settled[0].outcome == "Lisbon, 40 people (by the agent, in #1)"
        )
        assert s.channel.texts(ADDRESS) == [
            "A subagent is looking.",
            "I answered the subagent.",
            "Hotel Tejo is booked.",
        ]
        notice = last_message(model, "plan the offsite", 2)
        assert notice.startswith(f"[notice] Subagent {SUB} asks you (question {QUESTION})")
        assert "Which city, and for how many people?" in notice and "find a venue" in notice
        assert "delegate action=answer" in notice
        answered = last_message(model, "plan the offsite", 3)
        assert answered == f"Answered {SUB}'s question {QUESTION}; it goes on with your answer now."
        got = last_message(model, "find a venue", 1)
        assert (
            got == f"The agent that started you answered (question {QUESTION}):\nLisbon, 40 people"
        )
        result = last_message(model, "plan the offsite", 4)
        assert "1 done" in result and "Hotel Tejo in Lisbon seats 40." in result
        # The subagent has ask_parent, the parent does not.
        assert "ask_parent" in [t.name for t in model.requests("find a venue")[0].tools]
        assert "ask_parent" not in [t.name for t in model.requests("plan the offsite")[0].tools]
        assert s.dispatcher._limit._value == 1  # the lent slot came back, once
        model.assert_complete()
    finally:
        await s.close()


async def test_the_parent_asks_the_person_first(tmp_path: Path) -> None:
    ask_user = {"questions": [{"question": "Lisbon or Porto?", "choices": ["Lisbon", "Porto"]}]}
    model = ConversationModel(
        {
            "plan the offsite": [
                spawn("find a venue"),
                Reply("A subagent is looking."),
                Reply(calls=[("ask_user", ask_user)]),
                answer("Porto, the user says"),
                Reply("Passed your choice on."),
                Reply("Casa do Rio in Porto is booked."),
            ],
            "find a venue": [ask("Which city?"), Reply("Casa do Rio, Porto.")],
        }
    )
    channel = AskingChannel("Porto")
    s = Setup(home_with(tmp_path), model, channel)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "plan the offsite"))
        await eventually(lambda: len(channel.texts(ADDRESS)) == 3, what="the result's turn")
        assert [q.text for q in channel.asked[0]] == ["Lisbon or Porto?"]
        assert "The user answered" in last_message(model, "plan the offsite", 3)
        got = last_message(model, "find a venue", 1)
        assert got.endswith("Porto, the user says")
        assert "Casa do Rio, Porto." in last_message(model, "plan the offsite", 5)
        model.assert_complete()
    finally:
        await s.close()


async def test_the_person_answers_on_the_dashboard_first_and_the_parent_is_told(
    tmp_path: Path,
) -> None:
    """The question is on the Waiting page (PendingAsks); the person answers there while the
    parent's turn is still thinking: the subagent goes on with the person's answer, the
    parent's own answer afterwards is refused saying so, and a notice tells the parent."""
    parent_answers, went_on = asyncio.Event(), asyncio.Event()
    model = ConversationModel(
        {
            "plan the offsite": [
                spawn("find a venue"),
                Reply("A subagent is looking."),
                Reply(calls=answer("Lisbon").calls, wait_for=parent_answers),  # the question's turn
                Reply("The person had answered already."),
                Reply("Noted: Porto."),  # the notice that the person answered
                Reply("Casa do Rio in Porto is booked."),  # the batch's result
            ],
            "find a venue": [
                ask("Which city?"),
                Reply("Casa do Rio, Porto.", wait_for=went_on),
            ],
        }
    )
    s = Setup(home_with(tmp_path, turns=2), model, RecordingChannel("test"))
    asks = s.dispatcher.asks
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "plan the offsite"))
        await eventually(lambda: bool(asks.open()), what="the question on the Waiting page")
        [pending] = asks.open()
        assert (pending.kind, pending.asker, pending.question) == (
            "subagent",
            f"subagent {SUB}",
            "Which city?",
        )
        assert pending.address == ADDRESS and pending.conversation_id == 1
        assert asks.answer_text(pending.id, "  Porto, 30 people ") is True
        assert asks.answer_text(pending.id, "Faro") is False  # the first answer won
        await eventually(lambda: len(model.requests("find a venue")) == 2, what="the answer")
        got = last_message(model, "find a venue", 1)
        assert got == f"The person answered (question {QUESTION}):\nPorto, 30 people"
        assert asks.settled[0].outcome == "Porto, 30 people (on the dashboard)"
        # The parent's answer, given after the person's, is refused and says why.
        parent_answers.set()
        await eventually(lambda: len(model.requests("plan the offsite")) >= 4, what="refusal")
        refused = last_message(model, "plan the offsite", 3)
        assert refused.startswith(f"Error: subagent {SUB} has no open question")
        assert "the person answered it on the dashboard: Porto, 30 people" in refused
        # And the parent is told, in a notice of its own.
        await eventually(lambda: len(model.requests("plan the offsite")) >= 5, what="notice")
        # (Stored while the question's turn ran: it sits before that turn's last answer.)
        history = model.requests("plan the offsite")[4].messages
        [told] = [m.content for m in history if "The person answered subagent" in m.content]
        assert told.startswith(f"[notice] The person answered subagent {SUB}'s question")
        assert "do not answer it yourself" in told and told.endswith("Porto, 30 people")
        went_on.set()
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 4, what="the result's turn")
        assert "Casa do Rio, Porto." in last_message(model, "plan the offsite", 5)
        model.assert_complete()
    finally:
        await s.close()


async def test_no_answer_in_time_and_a_late_answer_is_refused(tmp_path: Path) -> None:
    went_on = asyncio.Event()
    late = asyncio.Event()
    model = ConversationModel(
        {
            "plan the offsite": [
                spawn("find a venue"),
                Reply("A subagent is looking."),
                Reply("I will think about it."),  # the question's turn: no answer
                Reply(calls=[answer("Lisbon").calls[0]], wait_for=late),  # after the timeout
                Reply("Too late for that one."),
                Reply("It assumed Lisbon."),
            ],
            "find a venue": [
                ask("Which city?"),
                Reply("I assumed Lisbon: Hotel Tejo.", wait_for=went_on),
            ],
        }
    )
    # Two turns at once: the subagent keeps its slot in its model call after the timeout.
    s = Setup(home_with(tmp_path, seconds=0.3, turns=2), model, RecordingChannel("test"))
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "plan the offsite"))
        await eventually(lambda: len(model.requests("find a venue")) == 2, what="the timeout")
        got = last_message(model, "find a venue", 1)
        assert got.startswith("No answer: nobody answered within 0.3 s.")
        # The subagent is still at work; the parent's answer now comes too late.
        await s.dispatcher.wait_idle(ADDRESS)
        await s.dispatcher.submit(Inbound(ADDRESS, "answer it: Lisbon"))
        late.set()
        await eventually(lambda: len(model.requests("plan the offsite")) == 5, what="refusal")
        refused = last_message(model, "plan the offsite", 4)
        assert refused.startswith(f"Error: subagent {SUB} has no open question")
        assert f"its question {QUESTION} ended: nobody answered within 0.3 s" in refused
        assert "action=steer" in refused
        went_on.set()
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 4, what="the result's turn")
        assert "I assumed Lisbon" in last_message(model, "plan the offsite", 5)
        model.assert_complete()
    finally:
        await s.close()


async def test_a_parent_that_waits_for_its_subagents_cannot_answer(tmp_path: Path) -> None:
    model = ConversationModel(
        {
            "nightly offsite check": [spawn("find a venue"), Reply("Report: Hotel Tejo.")],
            "find a venue": [ask("Which city?"), Reply("Assumed Lisbon: Hotel Tejo.")],
        }
    )
    # The routine holds a slot while it waits for its subagent, which needs another.
    s = Setup(home_with(tmp_path, turns=2), model, RecordingChannel("test"))
    try:
        detached = await s.dispatcher.run_detached(
            "atlas", "nightly offsite check", run_kind="routine", chat="nightly"
        )
        assert detached.outcome is not None
        got = last_message(model, "find a venue", 1)
        assert got.startswith("No answer: the agent that started you waits for your result")
        model.assert_complete()
    finally:
        await s.close()


async def test_a_question_that_cannot_reach_the_parent_gets_no_answer(tmp_path: Path) -> None:
    model = ConversationModel({"find a venue": [ask("Which city?"), Reply("Assumed Lisbon.")]})
    s = Setup(home_with(tmp_path), model, RecordingChannel("test"))
    reports: list[str] = []

    async def notify(text: str) -> None:  # the parent's conversation is gone for questions
        if "asks you" in text:
            raise RuntimeError("conversation 1 no longer exists")
        reports.append(text)

    try:
        run = run_context(s.home, conversation_id=1, services=s.services)
        run.notify = notify
        started = await DELEGATE_TOOLS[0].invoke(run, {"tasks": [{"goal": "find a venue"}]})
        assert started.text.startswith("Started 1 subagent(s)")
        await eventually(lambda: bool(reports), what="the batch's report")
        got = last_message(model, "find a venue", 1)
        assert got.startswith("No answer: your question could not reach the agent that started")
        assert "conversation 1 no longer exists" in got
        assert "Assumed Lisbon." in reports[0]
    finally:
        await s.close()


async def test_stopping_atlas_while_a_subagent_waits_stops_it(tmp_path: Path) -> None:
    model = ConversationModel(
        {
            "plan the offsite": [
                spawn("find a venue"),
                Reply("A subagent is looking."),
                Reply("Let me think."),  # the question's turn: no answer yet
            ],
            "find a venue": [ask("Which city?")],
        }
    )
    s = Setup(home_with(tmp_path), model, RecordingChannel("test"))
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "plan the offsite"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="the question's turn")
        await s.dispatcher.wait_idle(ADDRESS)
        manager = s.services.subagents
        assert [r["status"] for r in await manager.listing(run_context(s.home))] == ["asking"]
        # The waiting run lent its slot: the only one is free while the parent is idle.
        assert s.dispatcher._limit._value == 1
        await s.services.close()  # what stopping the daemon does first
        row = await s.runtime.audit.delegation(SUB)
        assert row["status"] == "stopped" and row["reason"] == "Atlas stopped"
        model.assert_complete()
    finally:
        await s.close()


@pytest.mark.parametrize("kind", ["conversation", "bot", "routine"])
async def test_only_a_subagent_has_ask_parent(tmp_path: Path, kind: RunKind) -> None:
    home = home_with(tmp_path)
    result = await ask_parent.invoke(run_context(home, kind=kind), {"question": "Which city?"})
    assert result.is_error
    assert f"only for subagents: a {kind} run has no agent that started it to ask" in result.text
    assert ask_parent.unavailable_reason(run_context(home, kind="subagent")) is None


async def test_ask_parent_without_a_running_dispatcher_says_so(tmp_path: Path) -> None:
    run = run_context(home_with(tmp_path), kind="subagent")
    result = await ask_parent.invoke(run, {"question": "Which city?"})
    assert result.is_error and "no running dispatcher" in result.text
    empty = await ask_parent.invoke(run, {"question": ""})
    assert empty.is_error and "question" in empty.text
