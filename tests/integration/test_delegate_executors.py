"""delegate with an executor, end to end: the tool, the daemon's services and the workbench,
the fake `claude` and `codex` (tests/fakes/) inside the real sandbox.

Scenarios: success (the result as a notice), a question (to the person as ask_user's), a
permission request (to the person, allowed or denied), the plan's limit mid-task (a route to
another account of the same executor, which resumes a copy of the session, and to the other
executor, which starts fresh from a handoff packet), resume, stop, and the gate asking the
person every time before acting on their own session.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from atlas.agents.services import HomeServices, provide_services
from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.dispatch import Dispatcher, Inbound
from atlas.executors.workbench import Instance
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.providers.scripted import Reply
from atlas.runtime import Runtime
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.delegate import delegate
from atlas.tools.registry import RunContext, ToolRegistry
from atlas.trust.gate import ALLOW_ONCE, DENY, settle
from atlas.trust.policy import RuleGate
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

FAKES = Path(__file__).resolve().parents[1] / "fakes"
ADDRESS = Address("atlas", "test", "chat-1", user="u1")


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    names = ("project", "claude-main", "claude-work", "codex-main")
    made = {name: tmp_path / name for name in names}
    for path in made.values():
        path.mkdir()
    return made


@pytest.fixture
def home(tmp_path: Path, folders: dict[str, Path]) -> Home:
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
        + f"""
[review]
enabled = false

[executors.claude-code]
enabled = true
binary = "{FAKES / "fake_claude.py"}"
accounts = {{ main = "{folders["claude-main"]}", work = "{folders["claude-work"]}" }}

[executors.codex]
enabled = true
binary = "{FAKES / "fake_codex.py"}"
accounts = {{ main = "{folders["codex-main"]}" }}
"""
    )
    return make_home(tmp_path / "home", config=config)


class Desk:
    """The person at the other end: answers approvals and questions, keeps the notices."""

    def __init__(self, approve: str | None = ALLOW_ONCE, choose: str = "postgres") -> None:
        self.approve, self.choose = approve, choose
        self.approvals: list[tuple[str, list[str]]] = []
        self.questions: list[list[Question]] = []
        self.notices: list[str] = []

    async def ask(self, question: str, choices: list[str]) -> str | None:
        self.approvals.append((question, choices))
        return self.approve

    async def ask_questions(self, questions: list[Question]) -> QuestionOutcome:
        self.questions.append(questions)
        return QuestionOutcome("submitted", (Answer((self.choose,), by="pat"),))

    async def notify(self, text: str) -> None:
        self.notices.append(text)


@pytest.fixture
async def services(home: Home) -> AsyncIterator[HomeServices]:
    runtime = Runtime(home, model=ConversationModel({}), registry=ToolRegistry([delegate]))
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    services = provide_services(dispatcher)
    yield services
    await services.close()
    await dispatcher.shutdown()
    await runtime.close()
    await stop_proxies()


def scenario(folder: Path, name: str) -> None:
    (folder / "fake-scenario").write_text(name)


def commit_a_file(project: Path) -> None:
    """A git repository with app.py committed: the diff of a packet is against it."""
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (project / "app.py").write_text("print('old')\n")
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)


def chat(home: Home, services: HomeServices, desk: Desk, **kwargs: Any) -> RunContext:
    run = run_context(home, services=services, **kwargs)
    run.ask, run.ask_questions, run.notify = desk.ask, desk.ask_questions, desk.notify
    return run


async def call(run: RunContext, **arguments: Any) -> str:
    result = await delegate.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


def bench(services: HomeServices) -> list[Instance]:
    assert services.executors is not None
    return services.executors.workbench.list()


async def ended(services: HomeServices, desk: Desk, count: int = 1) -> list[Instance]:
    await eventually(lambda: len(desk.notices) >= count, what="the task's notice")
    return bench(services)


# --- success, question, permission -------------------------------------------------------------


async def test_a_task_runs_in_its_folder_and_its_result_comes_back_as_a_notice(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk)
    text = await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "fix the test", "folder": str(folders["project"])}],
    )
    assert text.startswith("Started 1 executor task(s):")
    assert "claude-code@main" in text
    [instance] = await ended(services, desk)
    assert instance.state == "done" and instance.owner == "atlas" and instance.session_id
    assert instance.folder == folders["project"].resolve()
    notice = desk.notices[0]
    assert f"Executor task {instance.id} (claude-code@main" in notice
    assert "Its final answer:\nDone: fix the test" in notice and "Cost: $0.0123" in notice
    # The folder was writable inside the sandbox.
    assert (folders["project"] / "fake-claude-output.txt").read_text() == "fix the test"
    listing = await call(run, action="list")
    assert "The workbench (executor instances):" in listing
    assert f"- {instance.id} (done, yours, claude-code@main, {instance.folder}" in listing


async def test_its_question_reaches_the_person_and_their_answer_goes_back(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["claude-main"], "question")
    desk = Desk(choose="postgres")
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "set up a db", "folder": str(folders["project"])}],
    )
    await ended(services, desk)
    [[asked]] = desk.questions
    assert asked.text.endswith("asks: Which database?")
    assert asked.choices == ("sqlite", "postgres")
    assert "Set up postgres." in desk.notices[0]


@pytest.mark.parametrize(("approve", "said"), [(ALLOW_ONCE, "Deployed."), (DENY, "Not deployed")])
async def test_its_permission_request_is_the_persons_every_time(
    home: Home,
    services: HomeServices,
    folders: dict[str, Path],
    approve: str,
    said: str,
) -> None:
    scenario(folders["claude-main"], "permission")
    desk = Desk(approve=approve)
    run = chat(home, services, desk)
    run.state.mode = "auto"  # auto mode does not answer it: the person does
    await call(
        run, executor="claude-code", tasks=[{"goal": "deploy", "folder": str(folders["project"])}]
    )
    await ended(services, desk)
    [(question, choices)] = desk.approvals
    assert "wants to use Bash: make deploy" in question and choices == [ALLOW_ONCE, DENY]
    assert said in desk.notices[0]


async def test_a_codex_question_is_answered_and_the_session_goes_on_with_the_answer(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["codex-main"], "question")
    desk = Desk(choose="sqlite")
    run = chat(home, services, desk)
    await call(run, executor="codex", tasks=[{"goal": "a db", "folder": str(folders["project"])}])
    [instance] = await ended(services, desk)
    [[asked]] = desk.questions
    assert asked.text.endswith("asks: Which database?") and asked.choices == ("sqlite", "postgres")
    assert instance.state == "done"
    assert "Done: Answers to your questions:\nWhich database?: sqlite" in desk.notices[0]


class Record:
    """Stands in for the delegation record (atlas/executors/record.py): keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def start_turn(self, *args: Any) -> int:
        self.calls.append(("start_turn", *args))
        return len(self.calls)

    async def add(self, turn_id: int, kind: str, text: str, who: str | None = None) -> None:
        self.calls.append(("add", turn_id, kind, text, who))

    async def finish_turn(self, turn_id: int, *args: Any) -> None:
        self.calls.append(("finish_turn", turn_id, *args))


async def test_every_turn_question_answer_and_end_goes_into_the_record(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    assert services.executors is not None
    record = Record()
    services.executors.record = record  # type: ignore[attr-defined]
    commit_a_file(folders["project"])
    scenario(folders["claude-main"], "question")
    desk = Desk(choose="postgres")
    run = chat(home, services, desk)
    await call(
        run, executor="claude-code", tasks=[{"goal": "a db", "folder": str(folders["project"])}]
    )
    [instance] = await ended(services, desk)
    start, question, answer, final, finish = record.calls
    assert start == (
        "start_turn",
        instance.id,
        "claude-code",
        "claude-code@main",
        str(folders["project"].resolve()),
        "a db",
        "atlas:1",
    )
    assert question == ("add", 1, "question", "Which database?", None)
    assert answer == ("add", 1, "answer", "Which database?: postgres", "pat")
    assert final == ("add", 1, "final", "Set up postgres.", None)
    name, turn, text, files, usage, state = finish
    assert (name, turn, text, state) == ("finish_turn", 1, "Set up postgres.", "done")
    assert usage["input_tokens"] == 120 and usage["cost_usd"] == 0.0123
    assert files == ""  # nothing changed in the repository


# --- the plan's limit: routes -------------------------------------------------------------------


async def test_at_its_limit_another_account_goes_on_in_a_copy_of_the_session(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["claude-main"], "limit")
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "refactor", "folder": str(folders["project"])}],
        route=["claude-code@work"],
    )
    [instance] = await ended(services, desk)
    notice = desk.notices[0]
    assert instance.state == "done" and instance.account == "claude-code@work"
    assert "It moved: claude-code@main → claude-code@work" in notice
    # The work account resumed the same session, with what the main account had logged.
    assert f"resumed {instance.session_id} (" in notice
    assert "earlier entries): Done: [Your session was moved" in notice


async def test_at_its_limit_the_other_executor_starts_fresh_from_a_handoff_packet(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    project = folders["project"]
    commit_a_file(project)
    (project / "app.py").write_text("print('half done')\n")  # what the first account changed
    scenario(folders["claude-main"], "limit")
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "refactor app.py", "context": "keep the API", "folder": str(project)}],
        route=["codex"],
    )
    [instance] = await ended(services, desk)
    assert instance.state == "done" and instance.account == "codex@main"
    assert "It moved: claude-code@main → codex@main" in desk.notices[0]
    packet = (project / "fake-codex-output.txt").read_text()
    assert packet.startswith("[Handoff: another coding agent (claude-code@main)")
    assert "You've hit your session limit" in packet
    assert "# Goal\nrefactor app.py\n\n# Context\nkeep the API" in packet
    assert "# What was done\n- Edit: app.py" in packet
    assert "-print('old')\n+print('half done')" in packet  # the diff so far
    assert "# The last messages\nassistant: Starting on it." in packet


async def test_with_no_route_left_it_stops_at_the_limit_and_says_how_to_go_on(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["claude-main"], "limit")
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code@main",
        tasks=[{"goal": "refactor", "folder": str(folders["project"])}],
        route=[],
    )
    [instance] = await ended(services, desk)
    assert instance.state == "limit"
    assert "at its plan's limit with no route left, resets " in desk.notices[0]
    assert f"delegate action=resume, subagent_id={instance.id}" in desk.notices[0]


# --- resume, stop -------------------------------------------------------------------------------


async def test_resume_goes_on_in_the_same_session(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run, executor="codex", tasks=[{"goal": "write tests", "folder": str(folders["project"])}]
    )
    [first] = await ended(services, desk)
    text = await call(run, action="resume", subagent_id=first.id, message="now the docs")
    assert text.startswith(f"{first.id} goes on on codex@main")
    [again] = await ended(services, desk, 2)
    assert again.id == first.id and again.state == "done"
    assert f"resumed {first.session_id} (" in desk.notices[1]
    assert "Done: now the docs" in desk.notices[1]


async def test_resume_on_the_other_executor_starts_from_a_packet_with_the_message(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "write tests", "folder": str(folders["project"])}],
    )
    [first] = await ended(services, desk)
    await call(run, action="resume", subagent_id=first.id, message="and docs", executor="codex")
    [again] = await ended(services, desk, 2)
    assert again.account == "codex@main" and again.executor == "codex"
    packet = (folders["project"] / "fake-codex-output.txt").read_text()
    assert "another coding agent (claude-code@main)" in packet
    assert "# Goal\nwrite tests" in packet and packet.endswith("# Now\nand docs")


async def test_a_resume_that_cannot_start_leaves_the_task_as_it_ended(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk)
    await call(run, executor="codex", tasks=[{"goal": "one", "folder": str(folders["project"])}])
    [first] = await ended(services, desk)
    refused = await delegate.invoke(
        run,
        {"action": "resume", "subagent_id": first.id, "message": "x", "executor": "codex@nope"},
    )
    assert refused.is_error and "has no account 'nope'" in refused.text
    await call(run, action="resume", subagent_id=first.id, message="two")  # still resumable
    await ended(services, desk, 2)


async def test_stop_ends_a_running_task(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["claude-main"], "slow")
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run, executor="claude-code", tasks=[{"goal": "slowly", "folder": str(folders["project"])}]
    )
    [instance] = bench(services)
    await eventually(lambda: bench(services)[0].session_id is not None, what="the session")
    assert await call(run, action="stop", subagent_id=instance.id, message="enough") == (
        f"Stopped {instance.id}."
    )
    [stopped] = bench(services)
    assert stopped.state == "stopped" and "enough" in stopped.detail
    assert desk.notices == []  # the agent stopped it: no notice
    failed = await delegate.invoke(
        run, {"action": "steer", "subagent_id": instance.id, "message": "x"}
    )
    assert failed.is_error and "has already ended (stopped)" in failed.text


async def test_a_routine_waits_for_the_result(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk, kind="routine")
    run.ask = run.ask_questions = None
    text = await call(
        run, executor="codex", tasks=[{"goal": "nightly check", "folder": str(folders["project"])}]
    )
    assert text.startswith("Executor task ex-") and "Done: nightly check" in text
    assert desk.notices == []


async def test_a_cancelled_routine_stops_the_tasks_it_waits_for(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    scenario(folders["codex-main"], "slow")
    run = chat(home, services, Desk(), kind="routine")
    tasks = [{"goal": "slow", "folder": str(folders["project"])}]
    waiting = asyncio.create_task(call(run, executor="codex", tasks=tasks))
    await eventually(lambda: bool(bench(services)) and bench(services)[0].session_id is not None)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await eventually(lambda: bench(services)[0].state == "stopped", what="the stop")
    assert "the run that started it was cancelled" in bench(services)[0].detail


async def test_a_wrong_target_or_a_task_without_its_folder_is_refused(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    run = chat(home, services, Desk())
    refused = await delegate.invoke(
        run,
        {
            "executor": "claude-code@nope",
            "tasks": [{"goal": "x", "folder": str(folders["project"])}],
        },
    )
    assert refused.is_error and "has no account 'nope'" in refused.text
    refused = await delegate.invoke(run, {"executor": "codex", "tasks": [{"goal": "x"}]})
    assert refused.is_error and "each task needs its `folder`" in refused.text
    assert bench(services) == []


async def test_an_account_login_gives_the_link_and_a_notice_when_it_ends(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    desk = Desk()
    run = chat(home, services, desk)
    text = await call(run, action="account", executor="codex@main")
    assert "Login of codex@main started (" in text and "login --device-auth" in text
    assert "https://auth.openai.com/codex/device" in text
    await eventually(lambda: bool(desk.notices), what="the login's notice")
    assert desk.notices == ["The login of codex@main ended: logged in."]


async def test_a_login_as_an_email_another_account_has_is_refused(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    profile = '{"oauthAccount": {"emailAddress": "pat@example.com"}}'
    (folders["claude-work"] / ".claude.json").write_text(profile)
    run = chat(home, services, Desk())
    refused = await delegate.invoke(
        run, {"action": "account", "executor": "claude-code@main", "account": "pat@example.com"}
    )
    assert refused.is_error
    assert "claude-code@work is logged in as pat@example.com already" in refused.text


# --- the person's own instances, through the gate ------------------------------------------------


class Control:
    def __init__(self) -> None:
        self.steers: list[str] = []
        self.stops: list[str] = []

    async def steer(self, message: str) -> str:
        self.steers.append(message)
        return "sent into its session"

    async def stop(self, reason: str) -> None:
        self.stops.append(reason)


async def test_acting_on_the_persons_own_session_is_asked_every_time_even_in_auto_mode(
    home: Home, services: HomeServices, folders: dict[str, Path]
) -> None:
    assert services.executors is not None
    assert services.executors.workbench is services.workbench  # where the plugin adds them
    control = Control()
    services.executors.workbench.add(
        Instance(
            "cc-desk1",
            "claude-code",
            "claude-code@main",
            folders["project"],
            owner="person",
            session_id="s-1",
            control=control,
        )
    )
    gate = RuleGate(home, None, None)
    desk = Desk(approve=ALLOW_ONCE)
    run = chat(home, services, desk)
    run.state.mode = "auto"
    steer = ToolCall(
        "c1", "delegate", '{"action": "steer", "subagent_id": "cc-desk1", "message": "add docs"}'
    )
    for _ in range(2):  # allowed once is never remembered: asked again
        decision = await settle(gate, steer, delegate, run)
        assert decision.rule == "workbench:person" and decision.answered_by == "user"
    assert len(desk.approvals) == 2
    assert desk.approvals[0][1] == [ALLOW_ONCE, DENY]  # no "for this conversation"
    assert "your own claude-code session cc-desk1" in desk.approvals[0][0]
    assert "cc-desk1 (running, the person's, claude-code@main" in await call(run, action="list")
    assert await call(run, action="steer", subagent_id="cc-desk1", message="add docs") == (
        "Sent to cc-desk1: sent into its session."
    )
    desk.approve = DENY
    stop = ToolCall("c2", "delegate", '{"action": "stop", "subagent_id": "cc-desk1"}')
    denied = await settle(gate, stop, delegate, run)
    assert denied.rule == "workbench:person" and type(denied).__name__ == "Deny"
    # Atlas's own instances and subagents are not asked about.
    mine = ToolCall("c3", "delegate", '{"action": "stop", "subagent_id": "sa-123"}')
    assert type(await settle(gate, mine, delegate, run)).__name__ == "Allow"
    login = ToolCall("c4", "delegate", '{"action": "account", "executor": "codex@main"}')
    assert (await settle(gate, login, delegate, run)).rule == "workbench:login"
    assert control.steers == ["add docs"]


# --- through the dispatcher: the notice starts a turn in the conversation -------------------------


async def test_through_the_daemon_the_notice_is_a_turn_in_the_conversation(
    home: Home, folders: dict[str, Path]
) -> None:
    tasks = [{"goal": "fix the bug", "folder": str(folders["project"])}]
    model = ConversationModel(
        {
            "fix it with claude": [
                Reply(calls=[("delegate", {"executor": "claude-code", "tasks": tasks})]),
                Reply("Claude Code is on it."),
                Reply("Claude Code fixed the bug."),  # the turn the notice starts
            ],
        }
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry([delegate]))
    channel = RecordingChannel()
    dispatcher = Dispatcher(runtime, {"test": channel})
    services = provide_services(dispatcher)
    try:
        await dispatcher.submit(Inbound(ADDRESS, "fix it with claude"))
        await eventually(lambda: len(channel.texts(ADDRESS)) == 2, what="the notice's turn")
        await dispatcher.wait_idle(ADDRESS)
        assert channel.texts(ADDRESS) == ["Claude Code is on it.", "Claude Code fixed the bug."]
        notice = model.requests("fix it with claude")[2].messages[-1].content
        assert "Executor task ex-" in notice and "Done: fix the bug" in notice
        model.assert_complete()
    finally:
        await services.close()
        await dispatcher.shutdown()
        await runtime.close()
        await stop_proxies()
