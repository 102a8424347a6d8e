"""The Claude Code plugin's hooks, called as Claude Code calls them: the hook program run with
the event's JSON on stdin, against the daemon's bridge served on a real Unix socket; the
person's answer given by a Person (tests/helpers.py), as approvals are in the gate's tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from atlas.channels.base import Address
from atlas.executors.bridge import ExecutorBridge, socket_path
from atlas.executors.workbench import Instance, Workbench
from atlas.home import Home
from tests.helpers import Person, make_home

HOOK = Path(__file__).resolve().parents[2] / "atlas/executors/claude_plugin/hooks/atlas_hook.py"
CONFIG = """\
main = "atlas"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[executors.claude-code]
enabled = true
accounts = {{ main = "~/.claude", work = "{work}" }}
"""
WHERE = Address("atlas", "telegram:atlas", "42")


@pytest.fixture
def home() -> Iterator[Home]:
    # A short path: a Unix socket's path must fit in 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="atlas-w3-", dir="/tmp"))
    try:
        made = make_home(root / "h")
        (made.root / "config.toml").write_text(CONFIG.format(work=root / "claude-work"))
        yield Home(made.root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def event(name: str, session: str = "sess-1", **fields: object) -> dict[str, object]:
    """A hook input shaped as Claude Code's hooks reference documents it."""
    return {
        "session_id": session,
        "transcript_path": f"/home/me/.claude/projects/-src-app/{session}.jsonl",
        "cwd": "/src/app",
        "permission_mode": "default",
        "hook_event_name": name,
        **fields,
    }


def bash(command: str) -> dict[str, object]:
    return event(
        "PermissionRequest",
        tool_name="Bash",
        tool_input={"command": command, "description": "Run it"},
        permission_suggestions=[
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": command}],
                "behavior": "allow",
                "destination": "localSettings",
            }
        ],
    )


async def run_hook(home: Home, hook_input: object, **env: str) -> tuple[int, str, str, float]:
    """The hook as Claude Code runs it: stdin the event's JSON, Claude Code's environment."""
    environment = {"PATH": os.environ["PATH"], "HOME": str(home.root), "ATLAS_HOME": str(home.root)}
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOOK),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment | env,
    )
    raw = hook_input if isinstance(hook_input, bytes) else json.dumps(hook_input).encode()
    out, err = await asyncio.wait_for(process.communicate(raw), 30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode(), time.monotonic() - started


class Bench:
    """The bridge serving the plugin's socket over a workbench, with whom to ask; with `node`,
    a node's bridge (`atlas run --node NAME`), its socket in run/nodes/NAME/."""

    def __init__(
        self, home: Home, person: Person | None, wait: float = 10.0, node: str | None = None
    ) -> None:
        self.workbench = Workbench()
        self.person = person

        async def asker() -> tuple[Person, Address] | None:
            return (self.person, WHERE) if self.person is not None else None

        self.bridge = ExecutorBridge(
            home, lambda: self.workbench, asker, wait_seconds=wait, node=node
        )


@pytest.fixture
async def served(home: Home) -> AsyncIterator[Bench]:
    bench = Bench(home, Person("allow once"))
    await bench.bridge.start()
    try:
        yield bench
    finally:
        await bench.bridge.stop()


def decision(stdout: str) -> dict[str, object]:
    output = json.loads(stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == "PermissionRequest"
    return output["hookSpecificOutput"]["decision"]


# ---- sessions on the workbench ----------------------------------------------------------------


async def test_a_session_at_the_desk_is_the_persons_instance_from_start_to_end(
    home: Home, served: Bench
) -> None:
    work = str(home.root.parent / "claude-work")
    start = event("SessionStart", source="startup", model="claude-sonnet-5")
    code, out, err, _ = await run_hook(home, start, CLAUDE_CONFIG_DIR=work)
    assert (code, out) == (0, ""), err
    [instance] = served.workbench.list()
    assert instance.owner == "person"
    assert instance.session_id == "sess-1"
    assert instance.executor == "claude-code"
    assert instance.account == "claude-code@work"  # its CLAUDE_CONFIG_DIR is that account's
    assert instance.folder == Path("/src/app")
    assert instance.state == "idle"

    prompt = event("UserPromptSubmit", prompt="fix the failing test\nin tests/unit")
    assert (await run_hook(home, prompt, CLAUDE_CONFIG_DIR=work))[:2] == (0, "")
    instance = served.workbench.get(instance.id)
    assert (instance.state, instance.title) == ("running", "fix the failing test")

    stop = event("Stop", stop_hook_active=False, last_assistant_message="Done.")
    assert (await run_hook(home, stop, CLAUDE_CONFIG_DIR=work))[:2] == (0, "")
    assert served.workbench.get(instance.id).state == "idle"

    end = event("SessionEnd", reason="prompt_input_exit")
    assert (await run_hook(home, end, CLAUDE_CONFIG_DIR=work))[:2] == (0, "")
    ended = served.workbench.get(instance.id)
    assert ended.state == "done" and ended.ended and ended.ended_at is not None
    assert "prompt_input_exit" in ended.detail
    assert len(served.workbench.list()) == 1  # the same instance all along


async def test_the_default_config_folder_is_the_main_account(home: Home, served: Bench) -> None:
    await run_hook(home, event("SessionStart", source="startup"))
    [instance] = served.workbench.list()
    assert instance.account == "claude-code@main"


async def test_atlas_own_runs_are_left_alone(home: Home, served: Bench) -> None:
    # delegate's run: its instance is Atlas's; the plugin neither reports it nor answers for it.
    served.workbench.add(
        Instance("ex-atlas", "claude-code", "claude-code@main", Path("/src/app"), session_id="s2")
    )
    code, out, _, _ = await run_hook(home, bash("make test") | {"session_id": "s2"})
    assert (code, out) == (0, "")
    assert served.person.asked == []
    assert [i.id for i in served.workbench.list()] == ["ex-atlas"]
    assert served.workbench.get("ex-atlas").owner == "atlas"
    # And with the mark Atlas's own runs carry, the hook does not even reach the daemon.
    code, out, _, _ = await run_hook(home, bash("make test"), ATLAS_OWN_RUN="1")
    assert (code, out) == (0, "")
    assert served.person.asked == []
    assert [i.id for i in served.workbench.list()] == ["ex-atlas"]


# ---- permission prompts -----------------------------------------------------------------------


async def test_a_permission_prompt_allowed_by_the_person(home: Home, served: Bench) -> None:
    code, out, err, _ = await run_hook(home, bash("npm test"))
    assert code == 0, err
    assert decision(out) == {"behavior": "allow"}
    [(question, choices)] = served.person.asked
    assert "npm test" in question and "Bash" in question and "/src/app" in question
    assert choices == ["allow once", "deny", "answer at the desk"]
    [instance] = served.workbench.list()
    assert instance.owner == "person" and instance.state == "running"


async def test_a_permission_prompt_denied_by_the_person(home: Home, served: Bench) -> None:
    served.person = Person("deny")
    code, out, _, _ = await run_hook(home, bash("rm -rf build"))
    assert code == 0
    denied = decision(out)
    assert denied["behavior"] == "deny"
    assert "denied" in str(denied["message"]) and "telegram:atlas" in str(denied["message"])


@pytest.mark.parametrize("answer", ["answer at the desk", None, "something else"])
async def test_no_allow_without_the_persons_allow(
    home: Home, served: Bench, answer: str | None
) -> None:
    served.person = Person(answer)
    code, out, _, _ = await run_hook(home, bash("make deploy"))
    assert (code, out) == (0, "")  # no decision: Claude Code asks at the desk


async def test_no_answer_in_time_leaves_it_to_the_desk(home: Home) -> None:
    class Silent(Person):
        async def __call__(self, question: str, choices: list[str]) -> str | None:
            self.asked.append((question, choices))
            await asyncio.Event().wait()  # never answers
            return None

    bench = Bench(home, Silent(None), wait=0.5)
    await bench.bridge.start()
    try:
        code, out, _, took = await run_hook(home, bash("make deploy"))
    finally:
        await bench.bridge.stop()
    assert (code, out) == (0, "")
    assert len(bench.person.asked) == 1
    assert took < 10
    [instance] = bench.workbench.list()
    assert instance.state == "running"  # no longer `asking`


async def test_nobody_to_ask_leaves_it_to_the_desk(home: Home) -> None:
    bench = Bench(home, None)
    await bench.bridge.start()
    try:
        code, out, _, _ = await run_hook(home, bash("make deploy"))
    finally:
        await bench.bridge.stop()
    assert (code, out) == (0, "")


async def test_without_the_daemon_every_hook_gives_no_decision_at_once(home: Home) -> None:
    assert not socket_path(home).exists()
    for hook_input in (bash("make deploy"), event("SessionStart", source="startup")):
        code, out, err, took = await run_hook(home, hook_input)
        assert (code, out) == (0, ""), err
        assert took < 5


async def test_a_stale_socket_without_a_daemon_is_no_decision(home: Home) -> None:
    path = socket_path(home)
    path.parent.mkdir(parents=True)
    path.write_text("")  # not a socket at all
    code, out, _, _ = await run_hook(home, bash("make deploy"))
    assert (code, out) == (0, "")


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on: a crashed node's, or a node's on another machine of a
    shared home folder (its socket answers only there). Connecting to it is refused at once."""
    import socket

    path.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()  # bound and gone: the file stays


async def test_without_a_plain_daemon_the_hook_finds_a_live_nodes_socket(home: Home) -> None:
    stale_socket(socket_path(home, "n1"))  # first by name: refused, the next one is tried
    node = Bench(home, Person("allow once"), node="n2")
    await node.bridge.start()
    try:
        assert node.bridge.path == home.root / "run/nodes/n2/executors.sock"
        assert not socket_path(home).exists()  # no plain daemon
        code, out, err, _ = await run_hook(home, event("SessionStart", source="startup"))
        assert (code, out) == (0, ""), err
        code, out, err, _ = await run_hook(home, bash("make deploy"))
    finally:
        await node.bridge.stop()
    assert code == 0 and decision(out) == {"behavior": "allow"}, err
    [instance] = node.workbench.list()
    assert instance.session_id == "sess-1" and instance.owner == "person"
    [(question, _)] = node.person.asked
    assert "make deploy" in question
    assert not node.bridge.path.exists()


async def test_the_plain_daemons_socket_comes_before_a_nodes(home: Home, served: Bench) -> None:
    node = Bench(home, Person("deny"), node="n1")
    await node.bridge.start()
    try:
        code, out, _, _ = await run_hook(home, bash("make deploy"))
    finally:
        await node.bridge.stop()
    assert code == 0 and decision(out) == {"behavior": "allow"}  # the plain daemon's person
    assert node.person.asked == []


async def test_only_stale_sockets_is_no_decision(home: Home) -> None:
    stale_socket(socket_path(home))
    stale_socket(socket_path(home, "n1"))
    (home.root / "run/nodes/n2").mkdir()  # a node folder without a socket
    code, out, _, _ = await run_hook(home, bash("make deploy"))
    assert (code, out) == (0, "")


@pytest.mark.parametrize(
    "hook_input",
    [b"not json", b"[1, 2]", b'{"hook_event_name": "PermissionRequest"}', b"x" * (1 << 20 + 1)],
)
async def test_malformed_input_is_no_decision(home: Home, served: Bench, hook_input: bytes) -> None:
    code, out, _, _ = await run_hook(home, hook_input)
    assert (code, out) == (0, "")
    assert served.person.asked == []


# ---- the installed plugin, run through Claude Code's shell form -------------------------------


async def test_the_installed_plugin_finds_the_home_it_was_installed_for(
    home: Home, served: Bench
) -> None:
    from atlas.executors.plugin_install import write_plugin

    root = write_plugin(home)
    plugin = root / "atlas"
    hooks = json.loads((plugin / "hooks/hooks.json").read_text())
    [group] = hooks["hooks"]["PermissionRequest"]
    [hook] = group["hooks"]
    assert hook["command"].startswith(sys.executable)
    # Claude Code runs a command hook with `sh -c`, CLAUDE_PLUGIN_ROOT in the environment and
    # no ATLAS_HOME of ours: the hook reads the home baked into the plugin.
    environment = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    process = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        hook["command"],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=environment | {"CLAUDE_PLUGIN_ROOT": str(plugin)},
    )
    out, _ = await asyncio.wait_for(process.communicate(json.dumps(bash("ls")).encode()), 30)
    assert decision(out.decode()) == {"behavior": "allow"}
    manifest = json.loads((root / ".claude-plugin/marketplace.json").read_text())
    assert manifest["plugins"][0]["source"] == "./atlas"
    assert json.loads((plugin / ".claude-plugin/plugin.json").read_text())["name"] == "atlas"


# ---- the socket and what it accepts -----------------------------------------------------------


async def test_the_socket_is_the_users_alone(home: Home, served: Bench) -> None:
    path = socket_path(home)
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


async def test_a_second_bridge_refuses_a_served_socket_and_a_stale_one_is_replaced(
    home: Home, served: Bench
) -> None:
    other = Bench(home, None)
    with pytest.raises(OSError, match="another process"):
        await other.bridge.start()
    await served.bridge.stop()
    socket_path(home).write_text("")  # what a crash might leave
    await other.bridge.start()
    await other.bridge.stop()


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{", 400),
        (b'{"hook": {}}', 400),
        (json.dumps({"hook": event("SessionStart"), "extra": 1}).encode(), 400),
        (json.dumps({"hook": event("SessionStart", session="../../etc")}).encode(), 400),
        (json.dumps({"hook": event("Notification", message="hi")}).encode(), 400),
        (json.dumps({"hook": event("SessionStart") | {"cwd": 5}}).encode(), 400),
        (json.dumps({"hook": event("SessionStart"), "pad": "x" * (1 << 20)}).encode(), 413),
    ],
)
async def test_the_bridge_refuses_what_is_not_a_hook_report(
    home: Home, served: Bench, body: bytes, status: int
) -> None:
    connector = aiohttp.UnixConnector(path=str(socket_path(home)))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post("http://atlas/v1/session", data=body) as response,
    ):
        assert response.status == status
    assert served.workbench.list() == []


async def test_a_session_report_is_not_a_permission_request(home: Home, served: Bench) -> None:
    connector = aiohttp.UnixConnector(path=str(socket_path(home)))
    body = {"hook": event("SessionStart"), "config_dir": None}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post("http://atlas/v1/permission", json=body) as response,
    ):
        assert response.status == 400
    assert served.person.asked == []


async def test_atlas_own_claude_runs_carry_the_mark_the_hook_leaves_alone(tmp_path: Path) -> None:
    from atlas.config import ExecutorSettings
    from atlas.executors.base import TaskSpec
    from atlas.executors.claude_code import ClaudeCodeExecutor

    executor = ClaudeCodeExecutor(
        ExecutorSettings(binary=sys.executable, accounts={"work": str(tmp_path / "work")}),
        launcher=None,  # type: ignore[arg-type]
    )
    instance = await executor.start(TaskSpec(tmp_path, "hello", executor.account("work")))
    assert instance.env["ATLAS_OWN_RUN"] == "1"  # type: ignore[attr-defined]


# ---- whom the prompt is asked of (desk_approvals) and the daemon's wiring ----------------------


class AskingChannel:
    """A chat channel's ask: keeps where and what it was asked, answers `answer`."""

    def __init__(self, name: str, answer: str | None = "allow once") -> None:
        self.name, self.answer = name, answer
        self.asked: list[tuple[Address, str]] = []

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        self.asked.append((address, question))
        return self.answer


@pytest.fixture
async def talked(home: Home) -> AsyncIterator[object]:
    """The main bot's store: the person talked on Telegram, then Slack, then a routine ran."""
    from atlas.providers.base import Message
    from atlas.store.conversations import ConversationStore

    store = ConversationStore(home.bot("atlas").db_path)
    await store.open()
    for channel, chat, kind in [
        ("telegram:atlas", "42", "conversation"),
        ("slack:atlas", "C1", "conversation"),
        ("terminal", "cli", "conversation"),
        ("routine", "daily", "routine"),
    ]:
        made = await store.conversation(channel, chat, kind=kind, bot="atlas")  # type: ignore[arg-type]
        await store.append(made.id, Message("user", "hello"))

    async def store_of(bot: str) -> ConversationStore:
        assert bot == "atlas"
        return store

    yield store_of
    await store.close()


def approvals(home: Home, store_of: object, **settings: str) -> object:
    from atlas.config import ExecutorSettings
    from atlas.executors.desk_approvals import DeskApprovals

    channels = {name: AskingChannel(name) for name in ("telegram:atlas", "slack:atlas", "agents")}
    channels["telegram:other"] = AskingChannel("telegram:other")
    return DeskApprovals(ExecutorSettings(**settings), "atlas", channels, store_of)  # type: ignore[arg-type]


async def test_prompts_go_to_the_persons_latest_chat_with_the_main_bot(
    home: Home, talked: object
) -> None:
    desk = approvals(home, talked)
    assert await desk.address() == Address("atlas", "slack:atlas", "C1")  # type: ignore[attr-defined]
    desk = approvals(home, talked, approvals="telegram:atlas")
    assert await desk.address() == Address("atlas", "telegram:atlas", "42")  # type: ignore[attr-defined]
    desk = approvals(home, talked, approvals="telegram:atlas", approvals_chat="99")
    assert await desk.address() == Address("atlas", "telegram:atlas", "99")  # type: ignore[attr-defined]
    for off in ({"approvals": "off"}, {"approvals": "telegram:nobody"}):
        assert await approvals(home, talked, **off).asker() is None  # type: ignore[attr-defined]


async def test_the_daemons_bridge_asks_through_the_channel(home: Home, talked: object) -> None:
    from atlas.executors.bridge import serve_plugin

    telegram = AskingChannel("telegram:atlas", answer="allow once")
    workbench = Workbench()
    bridge = await serve_plugin(
        home,
        {"telegram:atlas": telegram},
        talked,  # type: ignore[arg-type]
        lambda: workbench,
    )
    assert bridge is not None
    try:
        code, out, _, _ = await run_hook(home, bash("pytest -x"))
    finally:
        await bridge.stop()
    assert code == 0 and decision(out) == {"behavior": "allow"}
    [(where, question)] = telegram.asked
    assert where == Address("atlas", "telegram:atlas", "42")
    assert "pytest -x" in question
    assert not socket_path(home).exists()  # gone with the daemon: the hooks fall back


class SilentChannel(AskingChannel):
    """A chat nobody answers in: its ask waits until cancelled."""

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        self.asked.append((address, question))
        await asyncio.Event().wait()
        return None


async def test_a_desk_prompt_waits_on_the_dashboard_too_and_its_answer_wins(
    home: Home, talked: object
) -> None:
    """The person's Claude Code prompt is listed with every other question a turn waits on
    (the dashboard's Waiting page): answered there, the chat's wait ends and the hook allows."""
    from atlas.executors.bridge import serve_plugin
    from atlas.pending_asks import PendingAsks

    telegram = SilentChannel("telegram:atlas")
    asks = PendingAsks()
    workbench = Workbench()
    bridge = await serve_plugin(
        home,
        {"telegram:atlas": telegram},
        talked,  # type: ignore[arg-type]
        lambda: workbench,
        None,
        asks,
    )
    assert bridge is not None
    try:
        hook = asyncio.create_task(run_hook(home, bash("make deploy")))
        for _ in range(500):
            if asks.open():
                break
            await asyncio.sleep(0.01)
        [waiting] = asks.open()
        assert "make deploy" in waiting.question and waiting.conversation_id == 0
        assert asks.answer_approval(waiting.id, "allow once")
        code, out, _, _ = await hook
    finally:
        await bridge.stop()
    assert code == 0 and decision(out) == {"behavior": "allow"}
    assert not asks.open() and telegram.asked


async def test_no_bridge_while_claude_code_is_off(home: Home) -> None:
    from atlas.executors.bridge import serve_plugin

    (home.root / "config.toml").write_text(
        (home.root / "config.toml").read_text().replace("enabled = true", "enabled = false")
    )
    off = Home(home.root)
    assert await serve_plugin(off, {}, None, lambda: None) is None  # type: ignore[arg-type]
    assert not socket_path(off).exists()


# ---- atlas executors install-plugin -----------------------------------------------------------


def fake_claude(folder: Path, fail_on: str | None = None) -> Path:
    """A `claude` that logs each call (its arguments and CLAUDE_CONFIG_DIR), one JSON a line."""
    log = folder / "calls.jsonl"
    script = folder / "claude"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], "
        "os.environ.get('CLAUDE_CONFIG_DIR')]) + '\\n')\n"
        f"sys.exit(1 if {fail_on!r} in sys.argv else 0)\n"
    )
    script.chmod(0o755)
    return log


def test_install_plugin_installs_with_claude_codes_own_commands(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.cli import main

    log = fake_claude(tmp_path, fail_on="uninstall")  # not installed yet: that failure is fine
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert main(["--home", str(home.root), "executors", "install-plugin", "--account", "work"]) == 0
    root = home.root / "claude-plugins"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    work = str((home.root.parent / "claude-work").resolve())
    assert calls == [
        [["plugin", "marketplace", "add", str(root)], work],
        [["plugin", "marketplace", "update", "atlas-local"], work],
        [["plugin", "uninstall", "atlas@atlas-local"], work],
        [["plugin", "install", "atlas@atlas-local"], work],
    ]
    assert (root / "atlas" / "atlas-home").read_text().strip() == str(home.root)
    assert "installed atlas@atlas-local" in capsys.readouterr().out


def test_install_plugin_says_what_fails(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.cli import main

    fake_claude(tmp_path, fail_on="install")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert main(["--home", str(home.root), "executors", "install-plugin"]) == 2
    assert "plugin install atlas@atlas-local` failed" in capsys.readouterr().err
    assert main(["--home", str(home.root), "executors", "install-plugin", "--account", "x"]) == 2
    assert "no Claude Code account 'x'" in capsys.readouterr().err


def test_install_plugin_without_claude_prints_the_commands(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no claude here
    assert main(["--home", str(home.root), "executors", "install-plugin"]) == 0
    out = capsys.readouterr().out
    assert (
        "claude plugin marketplace add" in out and "claude plugin install atlas@atlas-local" in out
    )
    assert "--plugin-dir" in out


async def test_a_hook_claude_code_gives_up_on_withdraws_its_question(home: Home) -> None:
    """Claude Code kills the hook at its timeout, or when the person presses Esc: the question
    waiting in the chat is given up with it, and the instance stops `asking`."""
    asked, given_up = asyncio.Event(), asyncio.Event()

    class Waiting(Person):
        async def __call__(self, question: str, choices: list[str]) -> str | None:
            self.asked.append((question, choices))
            asked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                given_up.set()
                raise
            return None

    back_to_running = asyncio.Event()

    class Watched(Workbench):
        def update(self, instance_id: str, **changes: object) -> Instance:
            if changes.get("state") == "running":
                back_to_running.set()
            return super().update(instance_id, **changes)

    bench = Bench(home, Waiting(None), wait=60)
    bench.workbench = Watched()
    await bench.bridge.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HOOK),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={"PATH": os.environ["PATH"], "ATLAS_HOME": str(home.root)},
        )
        assert process.stdin is not None
        process.stdin.write(json.dumps(bash("make deploy")).encode())
        process.stdin.close()
        async with asyncio.timeout(20):
            await asked.wait()
            [instance] = bench.workbench.list()
            assert instance.state == "asking"
            process.kill()
            await process.wait()
            await given_up.wait()
            await back_to_running.wait()
        assert bench.workbench.get(instance.id).state == "running"
    finally:
        await bench.bridge.stop()


async def test_a_resumed_session_is_live_again_on_its_instance(home: Home, served: Bench) -> None:
    await run_hook(home, event("SessionStart", source="startup"))
    await run_hook(home, event("SessionEnd", reason="prompt_input_exit"))
    [ended] = served.workbench.list()
    assert ended.ended
    await run_hook(home, event("SessionStart", source="resume"))  # `claude --resume sess-1`
    [again] = served.workbench.list()
    assert again.id == ended.id and not again.ended and again.ended_at is None
