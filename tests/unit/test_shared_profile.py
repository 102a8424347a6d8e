"""The home's profile is shared (issue 21.1): one USER.md every bot reads and writes, each bot's
own MEMORY.md, no update lost to two writers, and older homes merged into it with a copy kept."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import pytest

import atlas.tools.memory as memory_module
from atlas.channels.base import Address
from atlas.cli import main as atlas_main
from atlas.dispatch import Dispatcher, Inbound
from atlas.home import Home
from atlas.migrate_profile import MIGRATED, migrate_home
from atlas.newbot import create_bot
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.catalog import default_registry
from atlas.tools.memory import read_entries
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import make_home, run_context

REGISTRY = default_registry()


async def remember(home: Home, bot: str, target: str, content: str):  # type: ignore[no-untyped-def]
    """A memory call as the model makes it: raw JSON through the registry."""
    raw = json.dumps({"target": target, "action": "add", "content": content})
    return await REGISTRY.call(run_context(home, bot=bot), "memory", raw)


async def test_one_bot_learns_the_user_and_every_bot_reads_it(home: Home) -> None:
    create_bot(home, "scout", "Scout", "A second bot.")
    model = ScriptedModel(
        Reply(calls=[("memory", {"target": "user", "action": "add", "content": "Prefers tea."})]),
        Reply("noted"),
        Reply(calls=[("memory", {"target": "memory", "action": "add", "content": "Scout note."})]),
        Reply("hello"),
    )
    runtime = Runtime(home, model=model, registry=default_registry())
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel(answer="allow once")})
    for bot in ("atlas", "scout"):
        address = Address(bot, "test", "chat-1", user="u1")
        await dispatcher.submit(Inbound(address, "hi"))
        await dispatcher.wait_idle(address)
    await dispatcher.shutdown()
    await runtime.close()
    model.assert_complete()
    scout_prompt = model.requests[2].system  # scout's first request
    assert "Prefers tea." in scout_prompt
    assert read_entries(home.user_profile_path) == ["Prefers tea."]
    assert not (home.main_bot.memory_dir / "USER.md").exists()
    # MEMORY.md stays each bot's own.
    assert read_entries(home.bot("scout").memory_dir / "MEMORY.md") == ["Scout note."]
    assert not (home.main_bot.memory_dir / "MEMORY.md").exists()


async def test_two_bots_writing_at_once_lose_no_update(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read is slowed down so that, without the lock, both calls would read the same file
    and the second replace would drop the first one's entry."""
    create_bot(home, "scout", "Scout", "A second bot.")
    reading = threading.Event()
    real_read = memory_module.read_entries

    def slow_read(path: Path) -> list[str]:
        entries = real_read(path)
        reading.set()
        time.sleep(0.2)
        return entries

    monkeypatch.setattr(memory_module, "read_entries", slow_read)
    results = await asyncio.gather(
        remember(home, "atlas", "user", "Lives in Lyon."),
        remember(home, "scout", "user", "Works nights."),
    )
    assert reading.is_set() and not any(r.is_error for r in results), results
    assert sorted(real_read(home.user_profile_path)) == ["Lives in Lyon.", "Works nights."]


async def test_a_profile_over_its_limit_can_shrink_but_not_grow(home: Home) -> None:
    merged = [f"Entry {n}: " + "x" * 200 for n in range(8)]  # about 1,700 of 1,375 characters
    home.user_profile_path.write_text("\n\n".join(merged) + "\n")
    grown = await remember(home, "atlas", "user", "One more.")
    assert grown.is_error and "over its 1,375 limit" in grown.text
    raw = json.dumps({"target": "user", "action": "remove", "old_text": "Entry 3:"})
    trimmed = await REGISTRY.call(run_context(home), "memory", raw)
    assert not trimmed.is_error, trimmed.text
    assert "Over the limit" in trimmed.text and len(read_entries(home.user_profile_path)) == 7


# ---- migrating an older home -------------------------------------------------------------------


def old_home(root: Path) -> Path:
    """A home as Atlas kept it before: a USER.md per bot, the main bot's skills in its folder."""
    home = make_home(root)
    create_bot(home, "scout", "Scout", "A second bot.")
    (root / "bots" / "atlas" / "memory" / "USER.md").write_text("Name: Ana.\n\nPrefers tea.\n")
    (root / "bots" / "scout" / "memory" / "USER.md").write_text("prefers  TEA.\n\nWorks nights.\n")
    (root / "USER.md").unlink(missing_ok=True)
    for name, where in (("mine", "bots/atlas/skills"), ("clash", "bots/atlas/skills")):
        folder = root / where / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The bot's.\n---\nA.\n")
    (root / "bots/atlas/skills/.archive/gone-20200101T000000Z").mkdir(parents=True)
    library_clash = root / "skills" / "clash"
    library_clash.mkdir(parents=True)
    (library_clash / "SKILL.md").write_text("---\nname: clash\ndescription: The library's.\n---\n")
    return root


def test_loading_an_older_home_merges_the_profiles_and_keeps_copies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = old_home(tmp_path / "home")
    with caplog.at_level(logging.WARNING, logger="atlas.home"):
        home = Home(root)
    # Main bot first; the same entry in other spelling is not added twice.
    assert read_entries(home.user_profile_path) == ["Name: Ana.", "Prefers tea.", "Works nights."]
    for bot in ("atlas", "scout"):
        assert not (root / "bots" / bot / "memory" / "USER.md").exists()
    stamps = list((root / MIGRATED).iterdir())
    assert len(stamps) == 1
    kept = stamps[0] / "bots"
    assert (kept / "scout/memory/USER.md").read_text() == "prefers  TEA.\n\nWorks nights.\n"
    # The main bot's skills are the library now; a clash leaves the library's in place.
    assert (root / "skills/mine/SKILL.md").exists()
    assert "The library's" in (root / "skills/clash/SKILL.md").read_text()
    assert "The bot's" in (kept / "atlas/skills/clash/SKILL.md").read_text()
    assert (root / "skills/.archive/gone-20200101T000000Z").is_dir()
    assert not (root / "bots/atlas/skills").exists()
    assert home.main_bot.skills_dir == home.skills_dir
    logged = caplog.text
    assert "2 entries merged" in logged and "'clash'" in logged and "was not moved" in logged
    # Idempotent: a second load finds nothing to do and writes nothing.
    assert migrate_home(root) == []
    Home(root)
    assert list((root / MIGRATED).iterdir()) == stamps


def test_atlas_init_on_an_older_home_migrates_it_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = old_home(tmp_path / "home")
    assert atlas_main(["init", "--home", str(root)]) == 0
    out = capsys.readouterr().out
    assert "USER.md of bot 'scout': 1 entries merged" in out
    assert "skill 'mine' of the main bot moved" in out
    assert read_entries(root / "USER.md") == ["Name: Ana.", "Prefers tea.", "Works nights."]


def test_a_fresh_home_has_no_per_bot_profile_and_nothing_to_migrate(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    assert not (home.root / MIGRATED).exists()
    assert not (home.main_bot.root / "skills").exists()  # the main bot's skills are the library
    assert home.skills_dir.is_dir()


def test_a_migration_that_cannot_write_leaves_the_home_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = old_home(tmp_path / "home")

    def read_only(*_: object) -> list[str]:
        raise PermissionError(13, "Read-only file system", str(root / "USER.md"))

    monkeypatch.setattr("atlas.migrate_profile.migrate_home", read_only)
    with caplog.at_level(logging.WARNING, logger="atlas.home"):
        home = Home(root)
    assert "could not migrate" in caplog.text and "Read-only" in caplog.text
    assert (root / "bots/atlas/memory/USER.md").exists()  # untouched, tried again next load
    assert home.main_bot.is_main
