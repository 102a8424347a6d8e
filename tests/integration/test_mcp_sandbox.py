"""stdio MCP servers run in the bubblewrap sandbox: the fake server (Python, from the venv) works
there, writes only its own data folder, sees none of the Atlas home and no secret, reaches no
loopback listener; `"sandbox": false` and `[sandbox] enabled = false` run it outside; where the
sandbox cannot start, the server does not start either."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from atlas.home import Home
from atlas.mcp.launch import server_data_dir
from atlas.mcp.manager import McpManager, McpTimeouts
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

FAKE_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py"
FAST = McpTimeouts(connect=20.0, call=10.0, ping_interval=0.5, ping=2.0, retry_base=0.05)
SECRET = "sk-daemon-secret-5150"


def entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FAKE_SERVER)], **extra}


@pytest.fixture
async def start(home: Home) -> AsyncIterator[Any]:
    managers: list[McpManager] = []

    async def make(servers: dict[str, Any], for_home: Home | None = None) -> McpManager:
        target = for_home or home
        (target.root / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
        manager = McpManager(target, timeouts=FAST)
        managers.append(manager)
        await manager.start(wait=20)
        return manager

    yield make
    for manager in managers:
        await manager.stop()


async def call(manager: McpManager, home: Home, name: str, /, **arguments: Any) -> str:
    run = run_context(home)
    tool = next(t for t in manager.tools_for(run.bot) if t.name == name)
    result = await tool.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


async def test_sandboxed_server_sees_only_its_folder_and_granted_env(
    home: Home, start: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATLAS_TEST_DAEMON_SECRET", SECRET)
    manager = await start({"notes": entry(env={"GRANTED": "by-the-person"})})
    assert manager.status()[0].state == "ready", manager.status()[0].error
    assert await call(manager, home, "mcp__notes__echo", text="hi") == "hi"

    data = server_data_dir(home, "notes")
    assert await call(manager, home, "mcp__notes__env", name="HOME") == str(data)
    assert await call(manager, home, "mcp__notes__env", name="GRANTED") == "by-the-person"
    for name in ("ATLAS_TEST_DAEMON_SECRET", "SHELL", "LOGNAME"):  # not on the allow-list
        assert await call(manager, home, "mcp__notes__env", name=name) == "(unset)"
    environ = await call(manager, home, "mcp__notes__read", path="/proc/1/environ")
    assert SECRET not in environ

    # The home is an empty folder: no config.toml, no bot.toml, no mcp.json to read or change.
    for secret_file in (
        home.config_path,
        home.root / "mcp.json",
        run_context(home).bot.root / "bot.toml",
    ):
        text = await call(manager, home, "mcp__notes__read", path=str(secret_file))
        assert text.startswith("cannot read"), text
    before = home.config_path.read_text()
    # Writing there fails, or lands in the empty stand-in: the real file is never changed.
    await call(manager, home, "mcp__notes__write", path=str(home.config_path), text="")
    assert home.config_path.read_text() == before
    # Its own folder is writable, and lasts.
    note = data / "note.txt"
    assert await call(manager, home, "mcp__notes__write", path=str(note), text="kept") == "written"
    assert note.read_text() == "kept"


async def test_sandboxed_server_reaches_no_loopback_listener(home: Home, start: Any) -> None:
    reached: list[bool] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(True)
        writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        manager = await start({"inside": entry(), "outside": entry(sandbox=False)})
        inside = await call(manager, home, "mcp__inside__connect", host="127.0.0.1", port=port)
        assert inside.startswith("cannot connect") and reached == []
        # The same call from a server outside the sandbox does connect: the test can fail.
        outside = await call(manager, home, "mcp__outside__connect", host="127.0.0.1", port=port)
        assert outside == "connected"
    finally:
        listener.close()


async def test_sandboxed_server_reaches_only_allowed_domains_through_the_proxy(
    home_path: Path, start: Any
) -> None:
    """127.0.0.2 stands in for a listed domain, 127.0.0.3 for another (both reachable past the
    address fence by [web] allow_private, as a public host would be)."""
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello from {request.host}")

    runners, urls = [], {}
    for host in ("127.0.0.2", "127.0.0.3"):
        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        urls[host] = f"http://{host}:{site._server.sockets[0].getsockname()[1]}/"  # type: ignore[union-attr]
        runners.append(runner)
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        '\n[web]\nallow_private = ["127.0.0.2", "127.0.0.3"]\n'
        '\n[sandbox]\nallowed_domains = ["127.0.0.2"]\n'
    )
    home = make_home(home_path, config=config)
    try:
        manager = await start({"notes": entry()}, for_home=home)
        listed = await call(manager, home, "mcp__notes__fetch", url=urls["127.0.0.2"])
        assert listed.startswith("hello from 127.0.0.2"), listed
        other = await call(manager, home, "mcp__notes__fetch", url=urls["127.0.0.3"])
        assert other.startswith("cannot fetch: HTTP 403") and "no one to ask" in other, other
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_sandbox_false_runs_the_server_outside(home: Home, start: Any) -> None:
    manager = await start({"notes": entry(sandbox=False)})
    text = await call(manager, home, "mcp__notes__read", path=str(home.config_path))
    assert text == home.config_path.read_text()
    assert await call(manager, home, "mcp__notes__env", name="HOME") != str(
        server_data_dir(home, "notes")
    )


async def test_sandbox_disabled_in_config_runs_servers_outside(home_path: Path, start: Any) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[sandbox]\nenabled = false\n"
    home = make_home(home_path, config=config)
    manager = await start({"notes": entry()}, for_home=home)
    text = await call(manager, home, "mcp__notes__read", path=str(home.config_path))
    assert text == config


async def test_no_sandbox_means_no_server(
    home: Home, start: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.sandbox import launcher

    def unavailable(argv: Any, policy: Any) -> list[str]:
        raise launcher.SandboxUnavailable("bwrap is not installed: apt-get install bubblewrap")

    monkeypatch.setattr(launcher, "sandbox_argv", unavailable)
    manager = await start({"notes": entry(), "opted_out": entry(sandbox=False)})
    status = {s.name: s for s in manager.status()}
    assert status["notes"].state == "failed" and status["notes"].next_attempt is None
    error = status["notes"].error or ""
    assert "apt-get install bubblewrap" in error and '"sandbox": false' in error
    assert status["opted_out"].state == "ready"  # the person's opt-out still runs


async def test_a_cwd_inside_the_home_is_refused_when_sandboxed(home: Home, start: Any) -> None:
    manager = await start({"notes": entry(cwd="bots")})
    status = manager.status()[0]
    assert status.state == "failed" and "inside the Atlas home" in (status.error or "")
