"""A sandboxed command reaches the network only through Atlas's proxy: a listed domain passes, any
other is asked of the person (remembered for the conversation), and leaving the sandbox needs a
person. Where no sandbox can start, commands are refused (fail closed).

A fake "outside" site on 127.0.0.1 stands in for a listed domain ("localhost"); config.toml's
[web] allow_private lets the proxy's address fence reach it, as a person would have to say.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from atlas.home import Home
from atlas.sandbox import launcher
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.registry import RunContext
from atlas.tools.shell import jobs_for, run_command
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="bubblewrap and socat are needed",
)

NETWORK_CONFIG = """
[web]
allow_private = ["127.0.0.1/32"]

[sandbox]
allowed_domains = ["localhost"]
"""


@pytest.fixture
async def origin() -> AsyncIterator[int]:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello from {request.host}")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield runner.addresses[0][1]
    await runner.cleanup()


@pytest.fixture
async def home(home_path: Path) -> AsyncIterator[Home]:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + NETWORK_CONFIG
    made = make_home(home_path, config=config)
    yield made
    await jobs_for(made).shutdown()
    await stop_proxies()


class Person:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.questions: list[str] = []

    async def __call__(self, question: str, options: list[str]) -> str | None:
        self.questions.append(question)
        return self.answer if self.answer in options else None


def curl(url: str) -> str:
    # --noproxy '': go through the proxy even for localhost (NO_PROXY lists it for servers
    # started inside the sandbox itself).
    return f"curl -sS -m 10 --noproxy '' {url}"


async def sh(run: RunContext, command: str, **arguments: object) -> str:
    result = await run_command.invoke(run, {"command": command, "timeout": 30, **arguments})
    assert not result.is_error, result.text
    return result.text


async def test_a_listed_domain_passes_through_the_proxy(home: Home, origin: int) -> None:
    run = run_context(home)
    output = await sh(run, curl(f"http://localhost:{origin}/"))
    assert output.startswith(f"hello from localhost:{origin}"), output


async def test_a_background_job_keeps_its_channel_while_it_runs(home: Home, origin: int) -> None:
    run = run_context(home)
    command = "sleep 0.5; " + curl(f"http://localhost:{origin}/")
    answer = await sh(run, command, background=True)
    job = jobs_for(home).running()[0]
    assert job.id in answer and job.task is not None
    await asyncio.wait_for(job.task, 20)
    assert f"hello from localhost:{origin}" in job.log_path.read_text()


async def test_another_domain_is_asked_and_the_yes_remembered(home: Home, origin: int) -> None:
    run = run_context(home)
    person = Person("Allow for this conversation")
    run.ask = person
    first = await sh(run, curl(f"http://127.0.0.1:{origin}/"))
    second = await sh(run, curl(f"http://127.0.0.1:{origin}/"), background=False)
    assert "hello from 127.0.0.1" in first and "hello from 127.0.0.1" in second
    assert len(person.questions) == 1 and "127.0.0.1" in person.questions[0]


async def test_a_no_or_nobody_to_ask_blocks_the_domain(home: Home, origin: int) -> None:
    run = run_context(home)
    nobody = await sh(run, curl(f"http://127.0.0.1:{origin}/"))
    run.ask = Person("Deny")
    denied = await sh(run, curl(f"http://127.0.0.1:{origin}/"))
    for output in (nobody, denied):
        assert "hello from" not in output and "blocked by Atlas" in output
        assert "sandbox=false" in output  # the hint: the sandbox stopped it


async def test_leaving_the_sandbox_needs_a_person(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    run = run_context(home)
    refused = await run_command.invoke(run, {"command": f"touch {outside}", "sandbox": False})
    assert refused.is_error and "person" in refused.text
    contained = await sh(run, f"touch {outside}")  # /tmp inside is private
    assert not outside.exists() and "[exit code 0]" in contained
    run.ask = Person("Allow once")  # the gate asked; the person said yes
    await sh(run, f"touch {outside}", sandbox=False)
    assert outside.exists()


async def test_no_sandbox_fails_closed(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_probe", lambda: "bwrap (bubblewrap) is not installed; fix")
    result = await run_command.invoke(run_context(home), {"command": "echo ran"})
    assert result.is_error and "ran" not in result.text
    assert "not installed" in result.text


async def test_disabled_sandbox_runs_commands_as_before(
    home_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "[sandbox]\nenabled = false\n"
    run = run_context(make_home(home_path, config=config))
    monkeypatch.setattr(launcher, "_probe", lambda: "no sandbox here")  # not even looked at
    outside = tmp_path / "outside.txt"
    await sh(run, f"touch {outside}")
    assert outside.exists()
