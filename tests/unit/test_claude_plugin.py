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


async def run_hook(
    home: Home, hook_input: object, **env: str
) -> tuple[int, str, str, float]:
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
    """The bridge serving the plugin's socket over a workbench, with whom to ask."""

    def __init__(self, home: Home, person: Person | None, wait: float = 10.0) -> None:
        self.workbench = Workbench()
        self.person = person

        async def asker() -> tuple[Person, Address] | None:
            return (self.person, WHERE) if self.person is not None else None

        self.bridge = ExecutorBridge(home, lambda: self.workbench, asker, wait_seconds=wait)


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


@pytest.mark.parametrize(
    "hook_input",
    [b"not json", b"[1, 2]", b'{"hook_event_name": "PermissionRequest"}', b"x" * (1 << 20 + 1)],
)
async def test_malformed_input_is_no_decision(
    home: Home, served: Bench, hook_input: bytes
) -> None:
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
