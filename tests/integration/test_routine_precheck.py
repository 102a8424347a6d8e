"""A routine's pre-check (issue 37): the check runs in the bot's sandbox through the gate, and
decides whether the model is called. The requests are counted at a fake OpenAI server, through
the real SDK path: a quiet check costs no model request at all."""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from atlas.agents.services import provide_services
from atlas.channels.base import Address
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.routines.files import reconcile_files
from atlas.routines.scheduler import RoutineScheduler
from atlas.routines.store import RoutineRun, Target
from atlas.runtime import Runtime
from atlas.tools.routines import cronjob_manage
from tests.fakes.model_servers import FakeOpenAIServer
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import close_test_stores, make_home, open_store_for_tests, run_context

TARGET = Target("fake", "chat-1")
TOLD = Address("atlas", "fake", "chat-1")


@dataclass
class Rig:
    home: Home
    server: FakeOpenAIServer
    channel: RecordingChannel
    scheduler: RoutineScheduler

    async def run(self, name: str, precheck: str) -> RoutineRun:
        routine = await self.scheduler.store.create(
            "atlas", name, f"Tell me about {name}.", "every 1h", TARGET, precheck=precheck
        )
        run_id = await self.scheduler.run_now(routine)
        await self.scheduler.wait_runs()
        run = await self.scheduler.store.get_run(run_id)
        assert run is not None
        return run


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeOpenAIServer() as server:
        home = make_home(tmp_path / "home", base_url=server.base_url)
        (home.main_bot.workspace / "inbox").mkdir(parents=True)
        runtime = Runtime(home)  # the real router (openai SDK) and the real gate
        channel = RecordingChannel()
        dispatcher = Dispatcher(runtime, {"fake": channel})
        scheduler = RoutineScheduler(home, runtime.audit, dispatcher)
        provide_services(dispatcher).serve_routines(scheduler)
        await scheduler.start()
        try:
            yield Rig(home, server, channel, scheduler)
        finally:
            await scheduler.stop()
            await dispatcher.shutdown()
            await runtime.close()
            await close_test_stores()


async def test_a_quiet_check_makes_no_model_request(rig: Rig) -> None:
    run = await rig.run("mail", "ls inbox | grep -q . || { echo 'inbox empty'; exit 1; }")
    assert rig.server.requests == []  # 0 model tokens
    assert (run.status, run.delivery, run.text) == ("skipped", "skipped", "inbox empty")
    assert (run.input_tokens, run.output_tokens) == (0, 0)
    assert rig.channel.sent == []


async def test_a_check_with_news_hands_its_output_to_the_model(rig: Rig) -> None:
    (rig.home.main_bot.workspace / "inbox" / "1.eml").write_text("Subject: hello\n")
    rig.server.reply("One new mail: hello.")
    run = await rig.run("mail", "ls inbox | grep . && exit 0 || exit 1")
    assert len(rig.server.requests) == 1
    prompt = rig.server.requests[0]["messages"][-1]["content"]
    assert "Tell me about mail." in prompt
    assert "pre-check `ls inbox | grep . && exit 0 || exit 1` found something" in prompt
    assert '<untrusted_tool_result source="precheck">' in prompt and "1.eml" in prompt
    assert run.status == "ok" and rig.channel.sent == [(TOLD, "One new mail: hello.")]


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("echo broken >&2; exit 3", "failed: it exited 3"),
        ("rm -rf ~", "the approval gate denied it"),  # through the gate, nobody to ask
    ],
)
async def test_a_failing_or_refused_check_is_a_failed_run_told_to_its_target(
    rig: Rig, command: str, why: str
) -> None:
    run = await rig.run("check", command)
    assert rig.server.requests == []
    assert run.status == "failed" and why in run.error
    assert len(rig.channel.sent) == 1 and why in rig.channel.sent[0][1]


async def test_the_routine_file_and_the_tool_take_a_precheck(rig: Rig) -> None:
    (rig.home.routines_dir / "tests.toml").write_text(
        'schedule = "every 1h"\nprompt = "Report the failing tests."\n'
        'precheck = "test -e failed.txt"\n'
    )
    report = await reconcile_files(rig.home, rig.scheduler.store)
    assert report.created == ["tests"], report.summary()
    stored = await rig.scheduler.store.find("atlas", "tests")
    assert stored is not None and stored.precheck == "test -e failed.txt"
    run = run_context(rig.home)
    run.open_store = open_store_for_tests
    made = await cronjob_manage.invoke(
        run,
        {
            "action": "create",
            "name": "page",
            "prompt": "Say what changed on the page.",
            "schedule": "every 2h",
            "precheck": "curl -s https://example.org | sha256sum | diff -q - last.sha",
            "channel": "fake",
            "chat": "chat-1",
        },
    )
    assert not made.is_error, made.text
    assert "pre-check `curl -s https://example.org" in made.text
    page = await rig.scheduler.store.find("atlas", "page")
    assert page is not None and page.precheck.startswith("curl -s https://example.org")
    cleared = await cronjob_manage.invoke(
        run, {"action": "update", "job_id": "page", "precheck": ""}
    )
    assert "pre-check" not in cleared.text


def docs_prechecks() -> dict[str, dict[str, str]]:
    """The routine files with a pre-check that docs/routines.md shows, by their first word."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "routines.md").read_text()
    blocks = [tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", text, re.S)]
    shown = [b for b in blocks if "precheck" in b]
    assert len(shown) == 3, "docs/routines.md shows three pre-checks"
    return {b["precheck"].split()[0]: b for b in shown}


def _mail_arrives(workspace: Path) -> None:
    (workspace / "maildir" / "new").mkdir(parents=True)
    (workspace / "maildir" / "new" / "1700000000.M1.host").write_text("Subject: hi\n")


def _tests_fail(workspace: Path) -> None:
    (workspace / "project" / "test_sum.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_sum(self):\n        self.assertEqual(1 + 1, 30)\n"  # not the size of the passing one: a stale .pyc would pass
    )


async def test_the_docs_prechecks_are_quiet_until_there_is_news(rig: Rig) -> None:
    """Each example of docs/routines.md, run as written (the page's address aside: no network
    here, so the page is a local file), once with nothing to report and once with news."""
    examples = docs_prechecks()
    workspace = rig.home.main_bot.workspace
    (workspace / "project").mkdir()
    (workspace / "project" / "test_sum.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_sum(self):\n        self.assertEqual(1 + 1, 2)\n"
    )
    (workspace / "status.html").write_text("all systems go\n")
    page = examples["curl"]["precheck"].replace(
        "https://example.org/status", f"file://{workspace / 'status.html'}"
    )
    # (name, check, what brings news); the page below has no copy to compare with at its
    # first run, so it reports first and is quiet the second time.
    cases = [
        ("mail", examples["ls"]["precheck"], _mail_arrives),
        ("tests", examples["cd"]["precheck"], _tests_fail),
    ]
    for name, check, news in cases:
        quiet = await rig.run(f"{name}-quiet", check)
        assert quiet.status == "skipped", (name, quiet)
        news(workspace)
        rig.server.reply(f"news from {name}")
        told = await rig.run(f"{name}-news", check)
        assert told.status == "ok", (name, told)
    rig.server.reply("the page changed")
    assert (await rig.run("page-first", page)).status == "ok"
    assert (await rig.run("page-same", page)).status == "skipped"
    (workspace / "status.html").write_text("degraded\n")
    rig.server.reply("the page changed again")
    changed = await rig.run("page-changed", page)
    assert changed.status == "ok"
    assert len(rig.server.requests) == 4  # one per run with news, none for the quiet ones
    prompts = [r["messages"][-1]["content"] for r in rig.server.requests]
    assert "1700000000.M1.host" in prompts[0]
    assert "AssertionError: 2 != 30" in prompts[1]
    assert "< all systems go" in prompts[3] and "> degraded" in prompts[3]
