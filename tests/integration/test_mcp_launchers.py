"""MCP servers started the usual way (`npx -y <package>`) install themselves inside the sandbox
from their launcher's registry, here a fake one on 127.0.0.2 (past the address fence by [web]
allow_private, as a public registry would be) that [sandbox] allowed_domains does not list: the
proxy lets the launcher reach it while the server installs, and the package stays in the
server's data folder. A server that cannot start says why in Atlas's words: the host the proxy
refused and the setting, a script under the sandbox's private /tmp, a launcher not installed."""

from __future__ import annotations

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
from tests.fakes.package_registry import PACKAGE, FakeRegistry, serve_registry
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="bubblewrap and socat are needed",
)

FAKE_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py"
FAKE_LAUNCHERS = FAKE_SERVER.parent / "launchers"
FAST = McpTimeouts(connect=30.0, call=10.0, ping_interval=5.0, ping=5.0, retry_base=30.0)
CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
    '\n[web]\nallow_private = ["127.0.0.2"]\n\n[sandbox]\nallowed_domains = []\n'
)


@pytest.fixture
async def registry() -> AsyncIterator[FakeRegistry]:
    async with serve_registry() as served:
        yield served


@pytest.fixture
def quiet_home(home_path: Path) -> Home:
    """A home whose commands may reach no domain at all without asking."""
    return make_home(home_path, config=CONFIG)


async def started(home: Home, servers: dict[str, Any]) -> McpManager:
    (home.root / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    manager = McpManager(home, timeouts=FAST)
    await manager.start(wait=30)
    return manager


def npx_entry(registry: FakeRegistry, **extra: Any) -> dict[str, Any]:
    env = {"npm_config_registry": registry.url, "FAKE_MCP_PYTHON": sys.executable}
    return {"command": "npx", "args": ["-y", PACKAGE], "env": env, **extra}


async def call(manager: McpManager, home: Home, name: str, /, **arguments: Any) -> str:
    run = run_context(home)
    tool = next(t for t in manager.tools_for(run.bot) if t.name == name)
    return (await tool.invoke(run, arguments)).text


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed")
async def test_npx_installs_from_its_registry_while_installing_only(
    quiet_home: Home, registry: FakeRegistry
) -> None:
    home = quiet_home
    manager = await started(home, {"notes": npx_entry(registry)})
    try:
        status = manager.status()[0]
        assert status.state == "ready", status.error
        assert await call(manager, home, "mcp__notes__echo", text="hi") == "hi"
        assert any(path.endswith(".tgz") for path in registry.requests), registry.requests
        # Installed and answering: the registry is no longer reachable from this server.
        fetched = await call(manager, home, "mcp__notes__fetch", url=registry.url + PACKAGE)
        assert fetched.startswith("cannot fetch: HTTP 403"), fetched
    finally:
        await manager.stop()
    # npx's cache is in the server's own folder, kept between starts.
    assert (server_data_dir(home, "notes") / ".npm" / "_npx").is_dir()


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed")
async def test_the_second_start_needs_no_registry(quiet_home: Home) -> None:
    async with serve_registry() as registry:
        entry = npx_entry(registry)
        manager = await started(quiet_home, {"notes": entry})
        await manager.stop()
        assert manager.status()[0].tools, "the first start (with the registry) failed"
    # The registry is gone: the package comes from the server's folder.
    manager = await started(quiet_home, {"notes": entry})
    try:
        status = manager.status()[0]
        assert status.state == "ready", status.error
        assert await call(manager, quiet_home, "mcp__notes__echo", text="again") == "again"
    finally:
        await manager.stop()


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed")
async def test_an_unknown_launcher_is_refused_the_registry_and_told_which_setting(
    quiet_home: Home, registry: FakeRegistry
) -> None:
    home = quiet_home
    wrapped = npx_entry(registry, command="sh", args=["-c", f"exec npx -y {PACKAGE}"])
    listed = {**wrapped, "allowed_domains": ["127.0.0.2"]}
    manager = await started(home, {"wrapped": wrapped, "listed": listed})
    try:
        status = {s.name: s for s in manager.status()}
        error = status["wrapped"].error or ""
        assert status["wrapped"].state == "failed", status["wrapped"]
        assert "the sandbox's proxy refused 127.0.0.2:" in error, error
        assert "\"allowed_domains\" on server 'wrapped'" in error, error
        # The server's own allowed_domains lets it through: the same command then starts.
        assert status["listed"].state == "ready", status["listed"].error
    finally:
        await manager.stop()


async def test_a_server_under_tmp_is_said_to_be_hidden(quiet_home: Home, tmp_path: Path) -> None:
    script = tmp_path / "server" / "mcp_server.py"
    script.parent.mkdir()
    shutil.copy(FAKE_SERVER, script)
    manager = await started(quiet_home, {"tmp": {"command": sys.executable, "args": [str(script)]}})
    try:
        status = manager.status()[0]
        assert status.state == "failed" and status.next_attempt is None, status
        error = status.error or ""
        assert f"{script} is under /tmp, which is private inside the sandbox" in error, error
        assert '"sandbox": false' in error and "mcp-data" in error, error
    finally:
        await manager.stop()


async def test_a_missing_launcher_says_what_to_install(quiet_home: Home, tmp_path: Path) -> None:
    entry = {"command": "uvx", "args": ["some-server"], "env": {"PATH": str(tmp_path)}}
    manager = await started(quiet_home, {"py": entry})
    try:
        status = manager.status()[0]
        assert status.state == "failed" and status.next_attempt is not None, status
        error = status.error or ""
        assert "uvx is not installed" in error and "install uv" in error, error
    finally:
        await manager.stop()


async def test_doctor_starts_each_server_once_and_says_why_one_did_not(
    quiet_home: Home, tmp_path: Path
) -> None:
    from atlas.doctor import run_checks

    servers = {
        "notes": {"command": sys.executable, "args": [str(FAKE_SERVER)]},
        "py": {"command": "uvx", "args": ["some-server"], "env": {"PATH": str(tmp_path)}},
    }
    (quiet_home.root / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    checks = {c.name: c for c in await run_checks(quiet_home.root, offline=True)}
    assert checks["mcp notes"].ok and "tool(s)" in checks["mcp notes"].detail
    assert not checks["mcp py"].ok and "uvx is not installed" in checks["mcp py"].detail


async def test_a_uvx_server_installs_from_the_index_its_env_names(
    quiet_home: Home, registry: FakeRegistry
) -> None:
    """A stand-in `uvx` (tests/fakes/launchers/uvx): the proxy's decision is what is tested."""
    env = {"UV_DEFAULT_INDEX": registry.url, "FAKE_MCP_PYTHON": sys.executable}
    entry = {"command": str(FAKE_LAUNCHERS / "uvx"), "args": ["fake-notes"], "env": env}
    manager = await started(quiet_home, {"py": entry})
    try:
        status = manager.status()[0]
        assert status.state == "ready", status.error
        assert registry.requests == ["/files/mcp_server.py"]
    finally:
        await manager.stop()
    cached = server_data_dir(quiet_home, "py") / ".cache" / "uv" / "fake-notes" / "server.py"
    assert cached.is_file()
