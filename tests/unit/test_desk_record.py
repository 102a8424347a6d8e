"""The person's own Claude Code turns go into the delegation record (atlas/executors/desk_record.py):
a prompt starts a turn, Stop ends it with the session log's last answer and the folder's diff
stat; delegation_search then finds them as the person's own."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from atlas.executors.bridge import serve_plugin
from atlas.executors.claude_files import project_key
from atlas.executors.desk_record import DeskEvent, DeskRecord
from atlas.executors.record import DelegationRecord
from atlas.executors.workbench import Instance, Workbench
from atlas.home import Home
from atlas.store.home_db import HomeStore
from atlas.tools.delegation_search import delegation_search
from tests.helpers import BASE_CONFIG, make_home, run_context
from tests.unit.test_claude_plugin import event, run_hook


def home_with_claude(tmp_path: Path) -> Home:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f'\n[executors.claude-code]\nenabled = true\naccounts = {{ main = "{tmp_path / "cc"}" }}\n'
        "\n[sandbox]\nenabled = false\n"  # git here as it is; the sandbox is handoff.py's test
    )
    return make_home(tmp_path / "home", config=config)


def git_folder(folder: Path) -> None:
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    folder.mkdir()
    subprocess.run([*git, "init", "-q"], check=True)
    (folder / "app.py").write_text("print('old')\n")
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)


def session_line(role: str, text: str) -> str:
    return json.dumps(
        {"type": role, "timestamp": "2026-12-01T09:00:00Z", "message": {"content": text}}
    )


async def test_a_desk_turn_is_recorded_with_its_answer_and_files(tmp_path: Path) -> None:
    home = home_with_claude(tmp_path)
    folder, config_dir = tmp_path / "app", tmp_path / "cc"
    git_folder(folder)
    store = HomeStore(home.db_path)
    desk = DeskRecord(DelegationRecord(store, home=home), home)
    instance = Instance("ex-desk01", "claude-code", "claude-code@main", folder, owner="person")
    try:
        desk.note(DeskEvent("SessionStart", instance, "s-7", "", str(config_dir)))  # not a turn
        desk.note(
            DeskEvent("UserPromptSubmit", instance, "s-7", "rename the cache", str(config_dir))
        )
        await desk.drain()
        # Claude Code works: it edits a file and keeps its log.
        (folder / "app.py").write_text("print('new')\n")
        log = config_dir / "projects" / project_key(folder) / "s-7.jsonl"
        log.parent.mkdir(parents=True)
        lines = [session_line("user", "rename the cache"), session_line("assistant", "Renamed.")]
        log.write_text("\n".join(lines) + "\n")
        desk.note(DeskEvent("Stop", instance, "s-7", "", str(config_dir)))
        desk.note(DeskEvent("SessionEnd", instance, "s-7", "", str(config_dir)))  # nothing open
        await desk.drain()
    finally:
        await desk.close()
        await store.close()
    text = (await delegation_search.invoke(run_context(home), {"query": "cache"})).text
    assert "## ex-desk01 · claude-code@main" in text and "the person's own" in text
    assert "· done · session s-7" in text
    assert "[prompt] rename the cache" in text and "[final] Renamed." in text
    assert "[files] changed: app.py" in text and "app.py | 2 +-" in text


async def test_a_turn_whose_stop_never_came_ends_at_the_next_prompt(tmp_path: Path) -> None:
    home = home_with_claude(tmp_path)
    store = HomeStore(home.db_path)
    desk = DeskRecord(DelegationRecord(store), home)
    instance = Instance("ex-desk02", "claude-code", "claude-code@main", tmp_path, owner="person")
    try:
        desk.note(DeskEvent("UserPromptSubmit", instance, "s-8", "first", None))
        desk.note(DeskEvent("UserPromptSubmit", instance, "s-8", "second", None))
        await desk.drain()
        states = await store.call(
            lambda db: [r["state"] for r in db.query("SELECT state FROM executor_turns")]
        )
    finally:
        await desk.close()
        await store.close()
    assert states == ["done", "running"]


async def test_the_hooks_at_the_desk_fill_the_record(tmp_path: Path) -> None:
    """The plugin's hook run as Claude Code runs it, against the bridge the daemon serves with
    the record: the prompt and the end of the turn are recorded, the hook not kept waiting."""
    root = Path(tempfile.mkdtemp(prefix="atlas-w1-", dir="/tmp"))  # a Unix socket's short path
    try:
        home = home_with_claude(root)
        store = HomeStore(home.db_path)
        workbench = Workbench()
        bridge = await serve_plugin(
            home,
            {},
            None,
            lambda: workbench,
            DelegationRecord(store),  # type: ignore[arg-type]
        )
        assert bridge is not None and bridge.desk_record is not None
        try:
            prompt = event("UserPromptSubmit", session="s-9", prompt="tidy the imports")
            env = {"CLAUDE_CONFIG_DIR": str(root / "cc")}
            code, out, _, _ = await run_hook(home, prompt, **env)
            assert (code, out) == (0, "")
            await run_hook(home, event("Stop", session="s-9"), **env)
            await bridge.desk_record.drain()
        finally:
            await bridge.stop()
            await store.close()
        text = (await delegation_search.invoke(run_context(home), {})).text
        [instance] = workbench.list()
        assert f"## {instance.id} · claude-code@main · /src/app" in text
        assert "[prompt] tidy the imports" in text and "the person's own" in text
        assert ", done · the person's own" in text
    finally:
        shutil.rmtree(root, ignore_errors=True)
