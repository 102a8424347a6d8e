"""MCP servers (a fake written with the official SDK) over stdio and streamable HTTP: tools
found, loaded, called through the real tool loop, gated when untrusted, results wrapped and
spilled, and a crashed server restarted."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from atlas.agent.loop import ToolLoop
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.mcp.config import StdioServer, bot_server_names, load_mcp_config
from atlas.mcp.manager import McpManager, McpTimeouts
from atlas.mcp.tools import McpTool, mcp_gate_rule, registry_with_mcp, tool_name
from atlas.providers.base import Message, ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.store.conversations import ConversationStore
from atlas.tools.registry import RunContext, Tool, ToolRegistry
from atlas.trust.gate import ALLOW_ONCE, DENY, Allow, Decision, Deny, settle
from atlas.trust.policy import RuleGate
from tests.helpers import run_context

FAKE_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py"
FAST = McpTimeouts(connect=20.0, call=10.0, ping_interval=0.5, ping=2.0, retry_base=0.05)


def write_mcp_json(home: Home, servers: dict[str, Any]) -> None:
    (home.root / "mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def stdio_entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FAKE_SERVER)], **extra}


def add_bot(home: Home, name: str, toml: str) -> Home:
    folder = home.root / "bots" / name
    folder.mkdir(parents=True)
    (folder / "bot.toml").write_text(toml, encoding="utf-8")
    return Home(home.root)


class McpAwareGate(RuleGate):
    """RuleGate with the MCP rule first: the integration proposed for atlas/trust/policy.py."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        return mcp_gate_rule(call, tool, run) or await super().decide(call, tool, run)


class Person:
    """Answers approval questions with a fixed choice and remembers them."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.questions: list[str] = []

    async def __call__(self, question: str, choices: list[str]) -> str:
        self.questions.append(question)
        return self.answer


@pytest.fixture
async def manager_factory(home: Home) -> AsyncIterator[Any]:
    managers: list[McpManager] = []

    async def make(servers: dict[str, Any], *, for_home: Home | None = None) -> McpManager:
        write_mcp_json(home, servers)
        manager = McpManager(for_home or home, timeouts=FAST)
        managers.append(manager)
        await manager.start(wait=20)
        return manager

    yield make
    for manager in managers:
        await manager.stop()


@pytest.fixture
async def http_url() -> AsyncIterator[tuple[str, list[dict[bytes, bytes]]]]:
    """The fake server over streamable HTTP on 127.0.0.1, in this event loop; and the request
    headers it saw."""
    import asyncio

    import uvicorn

    from tests.fakes.mcp_server import build_server

    app = build_server().streamable_http_app()
    seen: list[dict[bytes, bytes]] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]))
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(recording, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}/mcp", seen
    server.should_exit = True
    await task
    sock.close()


async def call(manager: McpManager, run: RunContext, name: str, /, **arguments: Any) -> Any:
    tool = next(t for t in manager.tools_for(run.bot) if t.name == name)
    return await tool.invoke(run, arguments)


# --- mcp.json -----------------------------------------------------------------------------


def test_config_reads_claude_code_format_and_our_keys(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "x"], "env": {"A": "${A}"}},
                    "local": {"command": "local-server", "sandbox": False},
                    "web": {
                        "type": "http",
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "Bearer ${KEY:-none}"},
                        "trust": "untrusted",
                        "alwaysLoad": True,
                    },
                }
            }
        )
    )
    config = load_mcp_config(path)
    assert list(config.servers) == ["files", "local", "web"]
    files, web = config.servers["files"], config.servers["web"]
    assert isinstance(files, StdioServer) and files.sandbox  # sandboxed unless opted out
    local = config.servers["local"]
    assert isinstance(local, StdioServer) and not local.sandbox
    assert isinstance(files, StdioServer) and files.trust == "trusted" and not files.always_load
    assert web.trust == "untrusted" and web.always_load
    expanded = files.expanded(tmp_path, {"A": "secret"})
    assert expanded.env == {"A": "secret"} and files.env == {"A": "${A}"}
    assert web.expanded(tmp_path, {}).headers == {"Authorization": "Bearer none"}
    with pytest.raises(ConfigError, match=r"mcp.json: server 'files': env.A uses \$\{A\}"):
        files.expanded(tmp_path, {})


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"x": {"args": []}}, "server 'x': give \"command\""),
        ({"x": {"command": "a", "alwaysload": True}}, "server 'x': alwaysload: unknown key"),
        ({"x": {"type": "sse", "url": "http://h"}}, "server 'x': the SSE transport"),
        ({"x": {"type": "http"}}, "server 'x': url: required key is missing"),
        ({"x": {"command": "a", "trust": "maybe"}}, "server 'x': trust:"),
        ({"x": {"command": "a", "sandbox": "no"}}, "server 'x': sandbox:"),
        ({"bad name": {"command": "a"}}, "server 'bad name': a server name"),
        ({"x": ["a"]}, "server 'x': must be an object"),
    ],
)
def test_a_malformed_entry_names_file_and_server(
    tmp_path: Path, servers: dict[str, Any], message: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    with pytest.raises(ConfigError) as caught:
        load_mcp_config(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_malformed_json_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    assert load_mcp_config(path).servers == {}
    path.write_text('{"mcpServers": {,}}')
    with pytest.raises(ConfigError, match=r"mcp.json: malformed JSON: .* \(line 1, column 17\)"):
        load_mcp_config(path)


def test_bot_names_servers_as_table_keys_or_list() -> None:
    as_table = SimpleNamespace(settings=SimpleNamespace(mcp_servers={"a": {}, "b": {}}))
    as_list = SimpleNamespace(settings=SimpleNamespace(mcp_servers=["c"]))
    assert bot_server_names(as_table) == ["a", "b"]  # type: ignore[arg-type]
    assert bot_server_names(as_list) == ["c"]  # type: ignore[arg-type]


def test_tool_names_are_safe_for_every_provider() -> None:
    assert tool_name("notes", "add_note") == "mcp__notes__add_note"
    assert tool_name("notes", "a.b c") == "mcp__notes__a_b_c"
    long = tool_name("notes", "x" * 100)
    assert len(long) == 64 and long.startswith("mcp__notes__xxx")
    assert long != tool_name("notes", "x" * 99)


# --- stdio --------------------------------------------------------------------------------


async def test_stdio_tools_found_deferred_called_and_wrapped(home: Home, manager_factory) -> None:
    manager = await manager_factory(
        {"notes": stdio_entry(env={"GREETING": "${GREETING:-hello from env}"})}
    )
    run = run_context(home)
    tools = {t.name: t for t in manager.tools_for(run.bot)}
    assert set(tools) >= {"mcp__notes__echo", "mcp__notes__add_note", "mcp__notes__big"}
    echo = tools["mcp__notes__echo"]
    assert isinstance(echo, McpTool) and echo.deferred and echo.untrusted and echo.read_only
    assert not tools["mcp__notes__add_note"].read_only
    # The model is sent the server's own schema (titles stripped), not a pydantic stand-in.
    spec = echo.spec(run)
    assert spec.parameters["properties"]["text"] == {"type": "string"}
    assert spec.parameters["required"] == ["text"]
    assert "Answer with the text given" in spec.description

    # An argument named `run` reaches the server: it is not confused with the RunContext.
    result = await call(manager, run, "mcp__notes__echo", text="hi", run="x")
    assert (result.text, result.is_error, result.untrusted) == ("hi run=x", False, True)
    assert (await call(manager, run, "mcp__notes__env", name="GREETING")).text == "hello from env"
    failed = await call(manager, run, "mcp__notes__fail", message="no luck")
    assert failed.is_error and "reported a failure" in failed.text and "no luck" in failed.text
    assert "<untrusted_tool_result" in failed.text
    picture = await call(manager, run, "mcp__notes__picture")
    assert picture.images and picture.images[0].media_type == "image/png"
    assert (manager.home.root / "logs" / "mcp" / "notes.log").exists()


async def test_loop_loads_calls_wraps_and_spills(home: Home, manager_factory) -> None:
    manager = await manager_factory({"notes": stdio_entry()})
    bot = home.bot(None)
    store = ConversationStore(bot.db_path)
    await store.open()
    try:
        conversation = await store.conversation("console", "mcp", bot=bot.name)
        run = run_context(home, conversation_id=conversation.id)
        registry = registry_with_mcp(ToolRegistry(), manager.tools_for(bot))
        model = ScriptedModel(
            Reply(calls=[("mcp__notes__echo", {"text": "from the server"})]),
            Reply(calls=[("mcp__notes__big", {"lines": 5000})]),
            Reply("done"),
        )
        await store.append(conversation.id, Message("user", "go"))
        outcome = await ToolLoop(model, registry, McpAwareGate(home, None, None), store).run(run)
        model.assert_complete()
        assert outcome.text == "done"
        # Deferred: not offered until called by name, then offered with the server's schema.
        assert model.requests[0].tools == []
        assert [t.name for t in model.requests[1].tools] == ["mcp__notes__echo"]
        assert run.state.loaded_tools == ["mcp__notes__echo", "mcp__notes__big"]
        echoed, spilled = (m for m in model.requests[2].messages if m.role == "tool")
        assert '<untrusted_tool_result source="mcp__notes__echo">' in echoed.content
        assert "from the server" in echoed.content
        assert "line 5000 of the big answer" in spilled.content and "omitted" in spilled.content
        spill_file = home.spill_dir / bot.name / str(conversation.id)
        assert "line 2500 of" in next(spill_file.glob("*.txt")).read_text()
    finally:
        await store.close()


async def test_untrusted_server_asks_before_tools_not_read_only(
    home: Home, manager_factory
) -> None:
    manager = await manager_factory({"notes": stdio_entry(trust="untrusted")})
    gate = McpAwareGate(home, None, None)
    run = run_context(home)
    tools = {t.name: t for t in manager.tools_for(run.bot)}

    async def settle_call(name: str, arguments: dict[str, Any], person: Person | None):
        run.ask = person
        call = ToolCall("c1", name, json.dumps(arguments))
        return await settle(gate, call, tools[name], run)

    refuser = Person(DENY)
    denied = await settle_call("mcp__notes__add_note", {"text": "x"}, refuser)
    assert isinstance(denied, Deny) and denied.answered_by == "user"
    assert "marked untrusted" in refuser.questions[0] and '"text": "x"' in refuser.questions[0]
    approver = Person(ALLOW_ONCE)
    assert isinstance(await settle_call("mcp__notes__add_note", {"text": "y"}, approver), Allow)
    assert isinstance(await settle_call("mcp__notes__add_note", {"text": "z"}, approver), Allow)
    assert len(approver.questions) == 2  # every call asks
    # Nobody to ask (a routine, a subagent): denied.
    assert isinstance(await settle_call("mcp__notes__add_note", {"text": "w"}, None), Deny)
    # A tool that declares itself read-only does not ask.
    quiet = Person(DENY)
    assert isinstance(await settle_call("mcp__notes__echo", {"text": "hi"}, quiet), Allow)
    assert quiet.questions == []


def test_trusted_server_does_not_ask_unless_read_only_mode(home: Home) -> None:
    import mcp_types

    from atlas.mcp.tools import make_tool

    async def unused(server: str, tool: str, arguments: dict[str, Any], run: RunContext) -> Any:
        raise AssertionError("not called")

    listed = mcp_types.Tool(name="add_note", input_schema={"type": "object"})
    add_note = make_tool("notes", False, False, listed, unused)
    run = run_context(home)
    call = ToolCall("c1", add_note.name, '{"text": "x"}')
    assert add_note.spec(run).parameters == {"type": "object", "properties": {}}
    assert mcp_gate_rule(call, add_note, run) is None
    run.state.mode = "read-only"
    ask = mcp_gate_rule(call, add_note, run)
    assert ask is not None and ask.rule == "mode:read-only"


async def test_crashed_stdio_server_is_restarted(home: Home, manager_factory) -> None:
    import asyncio

    # Outside the sandbox: the test kills the server by the pid it reports, which inside the
    # sandbox's pid namespace would be another process's number here.
    manager = await manager_factory({"notes": stdio_entry(sandbox=False)})
    run = run_context(home)
    first_pid = int((await call(manager, run, "mcp__notes__pid")).text)
    os.kill(first_pid, signal.SIGKILL)
    failed = await call(manager, run, "mcp__notes__echo", text="anyone?")
    assert failed.is_error
    assert "MCP server 'notes'" in failed.text and "restarting" in failed.text
    # The tools stay listed while it is down, so the tool list does not change mid-conversation.
    assert any(t.name == "mcp__notes__echo" for t in manager.tools_for(run.bot))
    assert await manager.wait_connected("notes", 20)
    assert (await call(manager, run, "mcp__notes__echo", text="back")).text == "back"
    second_pid = int((await call(manager, run, "mcp__notes__pid")).text)
    assert second_pid != first_pid
    # Killed while nobody calls: the keeper's ping notices, and it is restarted all the same.
    os.kill(second_pid, signal.SIGKILL)
    for _ in range(200):
        if manager.status()[0].failures >= 2:
            break
        await asyncio.sleep(0.02)
    assert "did not answer a ping" in (manager.status()[0].error or "")
    assert await manager.wait_connected("notes", 20)
    assert (await call(manager, run, "mcp__notes__echo", text="again")).text == "again"


async def test_server_that_fails_to_start_is_reported_and_retried(
    home: Home, manager_factory, caplog: pytest.LogCaptureFixture
) -> None:
    manager = await manager_factory(
        {
            "broken": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no db')"]},
            "missing": {"command": "/nonexistent/server"},
            "secret": stdio_entry(env={"TOKEN": "${ATLAS_TEST_UNSET_VAR}"}),
            "notes": stdio_entry(),
        }
    )
    run = run_context(home)
    import asyncio

    # A retry may already be under way ("starting"): wait for each first failure, not a state.
    for _ in range(200):
        status = {s.name: s for s in manager.status()}
        if status["broken"].failures and status["missing"].failures:
            break
        await asyncio.sleep(0.05)
    assert status["notes"].state == "ready"
    assert status["broken"].failures >= 1 and status["missing"].failures >= 1
    assert "no db" in (status["broken"].error or "")  # the server's own stderr, from its log
    assert "ATLAS_TEST_UNSET_VAR" in (status["secret"].error or "")
    assert status["secret"].next_attempt is None  # a config error is not retried
    # The others are retried with backoff, and the bot works with the server that runs.
    for _ in range(200):
        if manager.status()[1].failures >= 3:
            break
        await asyncio.sleep(0.05)
    assert {s.name: s for s in manager.status()}["missing"].failures >= 3
    assert {t.server for t in manager.tools_for(run.bot)} == {"notes"}  # type: ignore[attr-defined]
    assert "MCP server missing failed to start" in caplog.text


async def test_bot_gets_only_the_servers_it_names(home: Home, manager_factory) -> None:
    home = add_bot(home, "helper", 'title = "Helper"\n[mcp_servers.notes]\n')
    manager = await manager_factory(
        {"notes": stdio_entry(), "other": stdio_entry(alwaysLoad=True)}, for_home=home
    )
    main, helper = home.bot(None), home.bot("helper")
    assert {t.server for t in manager.tools_for(main)} == {"notes", "other"}  # type: ignore[attr-defined]
    assert {t.server for t in manager.tools_for(helper)} == {"notes"}  # type: ignore[attr-defined]
    other_echo = next(t for t in manager.tools_for(main) if t.name == "mcp__other__echo")
    assert not other_echo.deferred  # alwaysLoad
    # In a registry shared by all bots, a server the bot does not name is unavailable to it.
    reason = other_echo.unavailable_reason(run_context(home, bot="helper"))
    assert reason and "mcp_servers does not name" in reason


# --- streamable HTTP ----------------------------------------------------------------------


async def test_http_server_tools_called_with_expanded_headers(
    home: Home, manager_factory, http_url, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = http_url
    monkeypatch.setenv("ATLAS_TEST_MCP_HEADER", "s3cret")
    manager = await manager_factory(
        {
            "web": {
                "type": "http",
                "url": url,
                "headers": {"X-Api": "${ATLAS_TEST_MCP_HEADER}"},
                "trust": "untrusted",
            }
        }
    )
    run = run_context(home)
    assert {s.name: s.state for s in manager.status()} == {"web": "ready"}
    assert (await call(manager, run, "mcp__web__echo", text="over http")).text == "over http"
    assert (await call(manager, run, "mcp__web__add_note", text="a")).text == "1 note(s)"
    assert seen and all(h.get(b"x-api") == b"s3cret" for h in seen)
    add_note = next(t for t in manager.tools_for(run.bot) if t.name == "mcp__web__add_note")
    assert isinstance(add_note, McpTool) and add_note.ask_every_call


async def test_http_server_down_then_back(home: Home, manager_factory) -> None:
    import asyncio

    import uvicorn

    from tests.fakes.mcp_server import build_server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    manager = await manager_factory(
        {"web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}}
    )
    run = run_context(home)
    status = manager.status()[0]
    assert status.state == "failed" and "ConnectError" in (status.error or "")
    assert manager.tools_for(run.bot) == []
    server = uvicorn.Server(
        uvicorn.Config(
            build_server().streamable_http_app(), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        assert await manager.wait_connected("web", 20)
        assert (await call(manager, run, "mcp__web__echo", text="late")).text == "late"
    finally:
        server.should_exit = True
        await task


async def test_tools_listed_again_when_the_server_says_they_changed(
    home: Home, manager_factory
) -> None:
    import asyncio

    manager = await manager_factory({"notes": stdio_entry()})
    run = run_context(home)
    registry = manager.registry_over(ToolRegistry())
    assert registry.get("mcp__notes__grown") is None
    assert manager.registry_over(ToolRegistry()) is not registry  # another base, another registry
    base = ToolRegistry()
    assert manager.registry_over(base) is manager.registry_over(base)  # cached
    assert (await call(manager, run, "mcp__notes__grow")).text == "grew"
    for _ in range(100):
        if manager.registry_over(base).get("mcp__notes__grown") is not None:
            break
        await asyncio.sleep(0.02)
    grown = manager.registry_over(base).get("mcp__notes__grown")
    assert grown is not None and (await grown.invoke(run, {})).text == "grown"
