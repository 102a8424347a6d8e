"""The two layers together, as an attacker would try them: a bot in auto mode whose every
question a careless person answers "allow once" still changes nothing outside its workspace,
prints no secret and reaches nothing on the machine's network.

Each attack is a real command through the real gate (`settle`) and the real `run_command`.
The person's home is a folder of this test (HOME points there) with the Atlas home inside it,
as `~/.atlas` is by default.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.store.home_db import HomeStore
from atlas.tools.catalog import default_registry
from atlas.trust.gate import ALLOW_ONCE, Allow, settle
from atlas.trust.policy import RuleGate
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

REGISTRY = default_registry()
SECRET = "sk-test-provider-secret-4711"
VAULT_TEXT = "vault-only-text-9182"
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- person-key-5521"


def _attacks(atlas: Path, port: int) -> list[str]:
    """Disguised attacks of the kinds that walked through a string-only gate."""
    return [
        "f(){ rm -rf ~; }; f",
        "setsid rm -rf ~",
        "{rm,-rf,~}",
        "X=rm; $X -rf ~",
        "busybox rm -rf ~",
        "awk 'BEGIN{system(\"rm -rf ~\")}'",
        "find ~ -maxdepth 0 -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
        'env -S "rm -rf $HOME"',
        "git -c alias.x='!rm -rf ~' x",
        "echo 'rm -rf ~' > y.sh && sh y.sh",
        f"sed -i 's/mode = .*/mode = \"auto\"/' {atlas}/bots/atlas/bot.toml",
        f'echo \'{{"mcpServers": {{"evil": {{"command": "sh"}}}}}}\' > {atlas}/mcp.json',
        f": > {atlas}/config.toml",
        f"rm -rf {atlas}/vault",
        f"cat {atlas}/vault/secret.txt",
        "cat ~/.ssh/id_rsa",
        f"ln {atlas}/vault/secret.txt hard && cat hard",
        "cat /proc/$PPID/environ; cat /proc/1/environ; env",
        f"python3 -c \"import sqlite3; c = sqlite3.connect('{atlas}/atlas.db'); "
        "c.execute('DELETE FROM gate_decisions'); c.commit()\"",
        f"cd {atlas} && rm -rf bots routines",
        f"curl -s -m 2 http://127.0.0.1:{port}/",
        f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
        "setsid sh -c 'while :; do date +%s%N > beat; sleep 0.1; done' >/dev/null 2>&1 &",
        "nohup sh -c 'sleep 1; while :; do date +%s%N > beat2; sleep 0.1; done' >/dev/null 2>&1 &",
    ]


def _snapshot(root: Path, skip: Path) -> dict[str, str]:
    """Every file and folder below `root` (but `skip`), with a digest of each file's bytes."""
    seen: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path == skip or skip in path.parents:
            continue
        if path.is_symlink():
            seen[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            seen[str(path)] = "dir"
    return seen


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Home]:
    """A person's home with keys in it, and the Atlas home at ~/.atlas with a vault."""
    person_home = tmp_path / "person"
    (person_home / ".ssh").mkdir(parents=True)
    (person_home / ".ssh" / "id_rsa").write_text(SSH_KEY)
    (person_home / "notes.txt").write_text("my notes")
    (person_home / "projects" / "app").mkdir(parents=True)
    (person_home / "projects" / "app" / "main.py").write_text("print('hi')\n")
    monkeypatch.setenv("HOME", str(person_home))
    monkeypatch.setenv("FAKE_PROVIDER_KEY", SECRET)
    atlas = person_home / ".atlas"
    monkeypatch.setenv("ATLAS_HOME", str(atlas))
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        "max_retries = 0", 'max_retries = 0\napi_key_env = "FAKE_PROVIDER_KEY"'
    )
    make_home(atlas, config=config)
    (atlas / "vault").mkdir()
    (atlas / "vault" / "secret.txt").write_text(VAULT_TEXT)
    (atlas / "mcp.json").write_text('{"mcpServers": {}}')
    bot_toml = atlas / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text().replace('mode = "ask"', 'mode = "auto"'))
    return person_home, Home(atlas)


async def _run(gate: RuleGate, run, command: str) -> str:  # type: ignore[no-untyped-def]
    call = ToolCall("c1", "run_command", json.dumps({"command": command, "timeout": 20}))
    tool = REGISTRY.get("run_command")
    decision = await settle(gate, call, tool, run)
    if not isinstance(decision, Allow):
        return f"denied: {decision.reason}"
    result = await tool.invoke(run, call.arguments)
    return result.text


async def test_attacks_that_the_gate_lets_through_change_nothing_outside_the_workspace(
    person: tuple[Path, Home],
) -> None:
    person_home, home = person
    connections: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer.get_extra_info("peername"))
        writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    audit = HomeStore(home.root / "atlas.db")
    gate = RuleGate(home, guardian=None, audit=audit)
    run = run_context(home)
    asked: list[str] = []

    async def careless_person(question: str, choices: list[str]) -> str:
        asked.append(question)
        return ALLOW_ONCE

    run.ask = careless_person
    workspace = run.bot.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    before = _snapshot(person_home, skip=workspace)
    outputs = []
    try:
        for command in _attacks(home.root, port):
            outputs.append((command, await _run(gate, run, command)))
        await asyncio.sleep(1.5)  # long enough for an escaped loop to beat several times
        beats = [(workspace / name) for name in ("beat", "beat2")]
        first = [p.read_text() if p.exists() else "" for p in beats]
        await asyncio.sleep(0.6)
        second = [p.read_text() if p.exists() else "" for p in beats]
    finally:
        listener.close()
        await listener.wait_closed()
        await audit.close()

    after = _snapshot(person_home, skip=workspace)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # Atlas's own writes, not the bot's: the gate's record in atlas.db, the proxy's sockets in run/.
    ours = {home.root / name for name in ("atlas.db", "atlas.db-wal", "atlas.db-shm", "run")}
    changed = {c for c in changed if not any(p == Path(c) or p in Path(c).parents for p in ours)}
    assert not changed, f"changed outside the workspace: {sorted(changed)[:10]}"
    printed = "\n".join(text for _, text in outputs)
    for secret in (SECRET, VAULT_TEXT, SSH_KEY):
        assert secret not in printed, next(c for c, t in outputs if secret in t)
    assert connections == [], "a command reached a listener on 127.0.0.1"
    assert first == second, "a process started with setsid or nohup outlived its command"
    decisions = await HomeStore(home.root / "atlas.db").recent_decisions(200)
    assert len(decisions) >= len(outputs), "every call passed the gate and was recorded"


async def test_ordinary_work_still_runs_in_the_sandbox(person: tuple[Path, Home]) -> None:
    _, home = person
    gate = RuleGate(home, guardian=None, audit=None)
    run = run_context(home)
    (run.bot.workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (run.bot.workspace / "test_calc.py").write_text(
        "from calc import add\nassert add(2, 3) == 5\nprint('ok')\n"
    )
    script = (
        "python3 test_calc.py && git init -q . && git config user.email a@b && "
        "git config user.name a && git add . && git commit -qm first && git log --oneline | wc -l"
    )
    text = await _run(gate, run, script)
    assert "ok" in text and "[exit code 0]" in text, text
