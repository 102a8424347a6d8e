"""A delegated task's harness reaching a host beyond its provider's: the person who delegated
is asked, as for a command's, and the proxy logs truthfully what happened. The fake `claude`
(scenario `fetch`) gets the URLs of its goal through the sandbox's proxy; the "other host" is a
local server on 127.0.0.1, which is no provider's."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from atlas.agents.services import HomeServices, provide_services
from atlas.dispatch import Dispatcher
from atlas.executors.egress import ALLOW, DENY
from atlas.home import Home
from atlas.runtime import Runtime
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.delegate import delegate
from atlas.tools.registry import ToolRegistry
from tests.fakes.agent_fakes import ConversationModel
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home
from tests.integration.test_delegate_executors import Desk, call, chat, ended

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(shutil.which("socat") is None, reason="socat bridges the proxy in"),
]

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    (tmp_path / "claude-main").mkdir()
    (tmp_path / "claude-main" / "fake-scenario").write_text("fetch")
    return tmp_path / "project"


@pytest.fixture
def home(tmp_path: Path, project: Path) -> Home:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f"\n[review]\nenabled = false\n\n[executors.claude-code]\nenabled = true\n"
        f'binary = "{FAKES / "fake_claude.py"}"\n'
        f'accounts = {{ main = "{tmp_path / "claude-main"}" }}\n'
        '\n[web]\nallow_private = ["127.0.0.1/32"]  # the proxy may reach the local server\n'
    )
    return make_home(tmp_path / "home", config=config)


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


@pytest.fixture
async def other_host() -> AsyncIterator[str]:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="reached the other host")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    await runner.cleanup()


async def fetched(home: Home, services: HomeServices, desk: Desk, url: str, ask: bool) -> str:
    """What the harness got for `url`, from the task's final answer."""
    run = chat(home, services, desk)
    if not ask:
        run.ask = None  # a run with nobody to ask (a routine with no chat)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": json.dumps([url]), "folder": str(project_of(home))}],
    )
    await ended(services, desk)
    answer = desk.notices[0].split("Its final answer:\n", 1)[1].split("\n", 1)[0]
    return str(json.loads(answer)[url])


def project_of(home: Home) -> Path:
    return home.root.parent / "project"


def host_questions(desk: Desk) -> list[str]:
    return [question for question, _ in desk.approvals if "wants to reach" in question]


async def test_a_host_beyond_the_provider_is_asked_and_a_yes_lets_it_through(
    home: Home, services: HomeServices, other_host: str
) -> None:
    desk = Desk(approve=ALLOW)
    assert await fetched(home, services, desk, other_host, ask=True) == "reached the other host"
    [question] = host_questions(desk)
    assert "(claude-code@main, in " in question and "wants to reach 127.0.0.1" in question
    assert [choices for q, choices in desk.approvals if q == question] == [[ALLOW, DENY]]


async def test_a_no_is_refused_and_logged_as_asked(
    home: Home, services: HomeServices, other_host: str, caplog: pytest.LogCaptureFixture
) -> None:
    desk = Desk(approve=DENY)
    with caplog.at_level(logging.INFO, logger="atlas.sandbox.proxy"):
        assert "403" in await fetched(home, services, desk, other_host, ask=True)
    assert len(host_questions(desk)) == 1
    assert "egress 127.0.0.1: asked the person, refused" in caplog.text


async def test_with_nobody_to_ask_it_is_refused_and_not_logged_as_asked(
    home: Home, services: HomeServices, other_host: str, caplog: pytest.LogCaptureFixture
) -> None:
    desk = Desk(approve=ALLOW)
    with caplog.at_level(logging.INFO, logger="atlas.sandbox.proxy"):
        assert "403" in await fetched(home, services, desk, other_host, ask=False)
    assert host_questions(desk) == []
    assert "asked the person" not in caplog.text
    assert "refused (not on the allow-list; no one to ask)" in caplog.text
