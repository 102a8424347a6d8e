"""delegate: subagents in the background, one notice per batch, steer, stop, routines wait,
and a subagent's dangerous call denied with nobody to ask."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.agent.loop import round_cap
from atlas.agents.services import provide_services
from atlas.agents.subagents import SUBAGENT_PROMPT
from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.scripted import Reply
from atlas.runtime import Runtime
from atlas.tools.delegate import DELEGATE_TOOLS
from atlas.tools.memory import MEMORY_TOOLS
from atlas.tools.registry import ToolRegistry
from atlas.tools.shell import SHELL_TOOLS
from atlas.trust.policy import RuleGate
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "test", "chat-1", user="u1")
CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[review]\nenabled = false\n"


def spawn(*goals: str) -> Reply:
    tasks = [{"goal": goal, "context": f"context for {goal}"} for goal in goals]
    return Reply(calls=[("delegate", {"tasks": tasks})])


class Setup:
    def __init__(self, home, model: ConversationModel) -> None:  # type: ignore[no-untyped-def]
        registry = ToolRegistry([*SHELL_TOOLS, *MEMORY_TOOLS, *DELEGATE_TOOLS])
        self.home = home
        self.model = model
        self.runtime = Runtime(home, model=model, registry=registry)
        # No guardian: what it would judge asks instead, which is what a subagent cannot do.
        self.runtime.gate = RuleGate(home, None, self.runtime.audit)
        self.channel = RecordingChannel()
        self.dispatcher = Dispatcher(self.runtime, {"test": self.channel})
        self.services = provide_services(self.dispatcher)

    async def close(self) -> None:
        await self.services.close()
        await self.dispatcher.shutdown()
        await self.runtime.close()

    async def parent_messages(self) -> list[tuple[str, str]]:
        store = await self.runtime.store(self.home.bot(None))
        conversation = await store.conversation("test", "chat-1", user="u1", bot="atlas")
        return [(m.role, m.content) for m in await store.history(conversation.id)]


@pytest.fixture
def agents_home(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_home(tmp_path / "home", config=CONFIG)


async def test_three_subagents_come_back_as_one_notice(agents_home) -> None:
    model = ConversationModel(
        {
            "compare vendors": [
                spawn("vendor alpha", "vendor beta", "vendor gamma"),
                Reply("Three subagents are on it."),
                Reply("Alpha is cheapest."),  # the turn the notice starts
            ],
            "vendor alpha": [Reply("alpha costs 5")],
            "vendor beta": [Reply("beta costs 7")],
            "vendor gamma": [Reply("gamma costs 9")],
        }
    )
    s = Setup(agents_home, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "compare vendors"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="the notice's turn")
        await s.dispatcher.wait_idle(ADDRESS)
        assert s.channel.texts(ADDRESS) == ["Three subagents are on it.", "Alpha is cheapest."]
        notices = [text for role, text in await s.parent_messages() if "[notice]" in text]
        assert len(notices) == 1
        for result in ("alpha costs 5", "beta costs 7", "gamma costs 9"):
            assert result in notices[0]
        assert "3 done" in notices[0]
        # The call returned at once, naming the subagents.
        tool_result = model.requests("compare vendors")[1].messages[-1].content
        assert tool_result.startswith("Started 3 subagent(s)")
        # A subagent knows only its goal and context, and has no memory or delegate tool.
        sub_request = model.requests("vendor beta")[0]
        assert [m.content for m in sub_request.messages] == [
            SUBAGENT_PROMPT.format(goal="vendor beta", context="context for vendor beta")
        ]
        assert [t.name for t in sub_request.tools] == ["run_command"]
        assert "Run kind: subagent" in sub_request.system
        rows = await s.runtime.audit.delegations("atlas", 1)
        assert sorted(r["goal"] for r in rows) == ["vendor alpha", "vendor beta", "vendor gamma"]
        assert {r["status"] for r in rows} == {"done"}
        assert all(r["input_tokens"] == 10 and r["output_tokens"] == 5 for r in rows)
        assert all(r["started_at"] <= r["ended_at"] for r in rows)
        assert {r["result"] for r in rows} == {"alpha costs 5", "beta costs 7", "gamma costs 9"}
        model.assert_complete()
    finally:
        await s.close()


async def test_at_most_the_configured_number_run_at_once(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG + "\n[agents]\nsubagents_at_once = 2\n")
    gates = {name: asyncio.Event() for name in ("job one", "job two", "job three")}
    model = ConversationModel(
        {
            "three jobs": [spawn(*gates), Reply("started"), Reply("all three done")],
            **{name: [Reply(f"{name} ok", wait_for=gate)] for name, gate in gates.items()},
        }
    )
    s = Setup(home, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "three jobs"))
        await eventually(
            lambda: sum(len(model.requests(n)) for n in gates) == 2, what="two subagents"
        )
        await asyncio.sleep(0.05)
        assert sum(len(model.requests(n)) for n in gates) == 2  # the third waits for a slot
        for gate in gates.values():
            gate.set()
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 2, what="the notice's turn")
        assert all(len(model.requests(n)) == 1 for n in gates)
    finally:
        await s.close()


async def test_steer_and_stop(agents_home) -> None:
    never = asyncio.Event()
    model = ConversationModel(
        {
            "two tasks": [spawn("slow survey", "stuck survey"), Reply("started both")],
            "slow survey": [Reply("never sent", wait_for=never)],
            "stuck survey": [Reply("never sent either", wait_for=never)],
        }
    )
    s = Setup(agents_home, model)
    try:
        await s.dispatcher.submit(Inbound(ADDRESS, "two tasks"))
        await s.dispatcher.wait_idle(ADDRESS)
        await eventually(
            lambda: model.requests("slow survey") and model.requests("stuck survey"),
            what="both subagents in their model call",
        )
        manager = s.services.subagents
        run = run_context(agents_home, conversation_id=1)
        rows = await manager.listing(run)
        ids = {r["goal"]: r["id"] for r in rows}
        assert {r["status"] for r in rows} == {"running"}
        model.script("two tasks").add(
            Reply(
                calls=[
                    ("delegate", {"action": "list"}),
                    (
                        "delegate",
                        {
                            "action": "steer",
                            "subagent_id": ids["slow survey"],
                            "message": "only count pricing pages",
                        },
                    ),
                    (
                        "delegate",
                        {
                            "action": "stop",
                            "subagent_id": ids["stuck survey"],
                            "message": "no longer needed",
                        },
                    ),
                ]
            ),
            Reply("steered one, stopped the other"),
            Reply("report received"),
        )
        model.script("slow survey").add(Reply("pricing pages: 4"))
        await s.dispatcher.submit(Inbound(ADDRESS, "change of plan"))
        await eventually(lambda: len(s.channel.texts(ADDRESS)) == 3, what="the notice's turn")
        results = [m.content for m in model.requests("two tasks")[3].messages[-3:]]
        assert "slow survey" in results[0] and "(running" in results[0]
        assert results[1].startswith(f"Sent to {ids['slow survey']}")
        assert results[2].startswith(f"Stopping {ids['stuck survey']}")
        # The steered subagent went on in its own conversation with the message.
        resumed = model.requests("slow survey")[1].messages
        assert resumed[-1].role == "user" and "only count pricing pages" in resumed[-1].content
        notice = [t for _, t in await s.parent_messages() if "[notice]" in t]
        assert len(notice) == 1
        assert "pricing pages: 4" in notice[0]
        assert "stopped by the agent that started it: no longer needed" in notice[0]
        stopped = await s.runtime.audit.delegation(ids["stuck survey"])
        assert stopped["status"] == "stopped" and "no longer needed" in stopped["reason"]
        done = await s.runtime.audit.delegation(ids["slow survey"])
        assert done["status"] == "done" and done["result"] == "pricing pages: 4"
        model.assert_complete()
    finally:
        await s.close()


async def test_steer_or_stop_of_an_unknown_or_ended_subagent_is_an_error(agents_home) -> None:
    model = ConversationModel({"quick": [Reply("done quickly")]})
    s = Setup(agents_home, model)
    try:
        run = run_context(agents_home, kind="routine", conversation_id=7, services=s.services)
        delegate = DELEGATE_TOOLS[0]
        result = await delegate.invoke(run, {"tasks": [{"goal": "quick", "context": ""}]})
        assert "done quickly" in result.text
        sub_id = (await s.runtime.audit.delegations("atlas", 7))[0]["id"]
        ended = await delegate.invoke(run, {"action": "stop", "subagent_id": sub_id})
        assert ended.is_error and "already ended (done)" in ended.text
        unknown = await delegate.invoke(run, {"action": "steer", "subagent_id": "sa-nope"})
        assert unknown.is_error and "no subagent 'sa-nope'" in unknown.text
        too_many = await delegate.invoke(run, {"tasks": [{"goal": "x"}] * 11})
        assert too_many.is_error and "tasks" in too_many.text
        elsewhere = run_context(agents_home, kind="routine", conversation_id=8, services=s.services)
        foreign = await delegate.invoke(elsewhere, {"action": "stop", "subagent_id": sub_id})
        assert foreign.is_error and "no subagent" in foreign.text
    finally:
        await s.close()


async def test_a_routine_waits_for_its_subagents_and_long_results_spill(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG + "\n[agents]\nsummary_chars = 1000\n")
    long_result = "\n".join(f"finding {i}: " + "x" * 40 for i in range(100))
    model = ConversationModel(
        {
            "nightly digest": [spawn("gather news", "gather weather"), Reply("digest written")],
            "gather news": [Reply(long_result)],
            "gather weather": [Reply("sunny")],
        }
    )
    s = Setup(home, model)
    try:
        detached = await s.dispatcher.run_detached(
            "atlas", "nightly digest", run_kind="routine", chat="digest"
        )
        assert detached.outcome is not None and detached.outcome.text == "digest written"
        waited = model.requests("nightly digest")[1].messages[-1].content
        assert "2 done" in waited and "sunny" in waited
        assert "finding 0" in waited and "finding 99" in waited and "finding 50" not in waited
        rows = await s.runtime.audit.delegations("atlas", detached.conversation_id)
        spilled = next(r for r in rows if r["goal"] == "gather news")["spill_path"]
        assert spilled in waited and Path(spilled).read_text() == long_result
        assert all(r["parent_run_kind"] == "routine" for r in rows)
        model.assert_complete()
    finally:
        await s.close()


async def test_a_subagents_dangerous_call_is_denied_with_nobody_to_ask(
    agents_home, tmp_path: Path
) -> None:
    precious = tmp_path / "precious"
    (precious / "inner").mkdir(parents=True)
    model = ConversationModel(
        {
            "clean up": [spawn("remove the old folder"), Reply("cleanup report read")],
            "remove the old folder": [
                Reply(calls=[("run_command", {"command": f"rm -rf {precious}"})]),
                Reply("I was not allowed to delete it."),
            ],
        }
    )
    s = Setup(agents_home, model)
    try:
        detached = await s.dispatcher.run_detached(
            "atlas", "clean up", run_kind="routine", chat="cleanup"
        )
        assert detached.outcome is not None
        assert precious.is_dir()
        denied = model.requests("remove the old folder")[1].messages[-1].content
        assert denied.startswith("Error: the approval gate denied this call")
        assert "nobody can answer in a subagent run" in denied
        decisions = await s.runtime.audit.recent_decisions()
        assert any(
            d["run_kind"] == "subagent" and d["verdict"] == "deny" and d["answered_by"] == "nobody"
            for d in decisions
        )
        waited = model.requests("clean up")[1].messages[-1].content
        assert "I was not allowed to delete it." in waited
    finally:
        await s.close()


async def test_a_subagent_past_its_time_limit_fails_and_says_why(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG + "\n[agents]\nsubagent_seconds = 0.2\n")
    model = ConversationModel(
        {
            "hurry": [spawn("endless task"), Reply("noted the failure")],
            "endless task": [Reply("never", wait_for=asyncio.Event())],
        }
    )
    s = Setup(home, model)
    try:
        await s.dispatcher.run_detached("atlas", "hurry", run_kind="routine", chat="hurry")
        waited = model.requests("hurry")[1].messages[-1].content
        assert "1 failed" in waited and "time limit of 0 s" in waited
    finally:
        await s.close()


async def test_delegate_is_not_for_subagents_and_rounds_follow_the_run_kind(agents_home) -> None:
    delegate = DELEGATE_TOOLS[0]
    assert delegate.unavailable_reason(run_context(agents_home, kind="subagent"))
    assert delegate.unavailable_reason(run_context(agents_home, kind="conversation")) is None
    assert round_cap(run_context(agents_home, kind="subagent")) == 25
    assert round_cap(run_context(agents_home, kind="routine")) == 40


async def test_delegate_without_a_running_dispatcher_says_so(agents_home) -> None:
    result = await DELEGATE_TOOLS[0].invoke(
        run_context(agents_home), {"tasks": [{"goal": "anything"}]}
    )
    assert result.is_error and "no running dispatcher" in result.text
