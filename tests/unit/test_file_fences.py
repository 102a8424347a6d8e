"""File tools' fences hold at open time: no symlink swapped in after the check, no hard link
into the vault, no search into the vault or the home's private files, attach_file fenced too."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.tools import files as files_module
from atlas.tools.attach import attach_file
from atlas.tools.catalog import default_registry
from atlas.tools.fences import Fence
from atlas.tools.files import edit_file, read_file, write_file
from atlas.tools.paths import resolve_path
from atlas.tools.registry import RunContext
from atlas.tools.search_files import find_files
from atlas.trust.gate import Allow, settle
from atlas.trust.policy import RuleGate
from tests.helpers import run_context

SECRET = "zebra-needle-s3cret"
REGISTRY = default_registry()


@pytest.fixture
def run(home: Home) -> RunContext:
    ctx = run_context(home)
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


@pytest.fixture
def ws(run: RunContext) -> Path:
    return run.bot.workspace


@pytest.fixture
def vault(run: RunContext) -> Path:
    folder = run.home.root / "vault"
    folder.mkdir(exist_ok=True)
    (folder / "key.txt").write_text(f"{SECRET}\n")
    return folder


async def call(run: RunContext, tool, **arguments):  # type: ignore[no-untyped-def]
    return await tool.invoke(run, arguments)


async def test_a_symlink_swapped_in_after_the_gates_check_cannot_leak_the_vault(
    run: RunContext, ws: Path, vault: Path
) -> None:
    notes = ws / "notes"
    notes.mkdir()
    (notes / "key.txt").write_text("harmless\n")
    gate = RuleGate(run.home, None, None)
    arguments = json.dumps({"path": "notes/key.txt"})
    decision = await settle(gate, ToolCall("c1", "read_file", arguments), read_file, run)
    assert isinstance(decision, Allow)
    shutil.rmtree(notes)
    os.symlink(vault, notes)  # the swap, after the check and before the tool opens
    result = await REGISTRY.call(run, "read_file", arguments)
    assert result.is_error and "changed while it was being opened" in result.text
    assert SECRET not in result.text


async def test_a_swap_between_the_tools_resolution_and_its_open_is_caught(
    run: RunContext, ws: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "notes").mkdir()
    (ws / "notes" / "key.txt").write_text("harmless\n")

    def resolve_then_swap(run: RunContext, tool: str, raw: str) -> Path:
        resolved = resolve_path(run, raw)
        shutil.rmtree(ws / "notes")
        os.symlink(vault, ws / "notes")
        return resolved

    monkeypatch.setattr(files_module, "judged_path", resolve_then_swap)
    for tool, arguments in (
        (read_file, {"path": "notes/key.txt"}),
        (write_file, {"path": "notes/key.txt", "content": "overwritten"}),
    ):
        result = await call(run, tool, **arguments)
        assert result.is_error and "changed while it was being opened" in result.text, tool.name
        assert SECRET not in result.text
        os.unlink(ws / "notes")
        (ws / "notes").mkdir()
        (ws / "notes" / "key.txt").write_text("harmless\n")
    assert (vault / "key.txt").read_text() == f"{SECRET}\n"


async def test_a_final_component_swapped_for_a_symlink_is_refused(
    run: RunContext, ws: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "key.txt").write_text("harmless\n")

    def resolve_then_swap(run: RunContext, tool: str, raw: str) -> Path:
        resolved = resolve_path(run, raw)
        (ws / "key.txt").unlink()
        os.symlink(vault / "key.txt", ws / "key.txt")
        return resolved

    monkeypatch.setattr(files_module, "judged_path", resolve_then_swap)
    result = await call(run, read_file, path="key.txt")
    assert result.is_error and SECRET not in result.text


async def test_a_hard_link_to_a_vault_file_is_refused_by_every_file_tool(
    run: RunContext, ws: Path, vault: Path
) -> None:
    os.link(vault / "key.txt", ws / "innocent.txt")
    read = await call(run, read_file, path="innocent.txt")
    assert read.is_error and "hard link" in read.text and SECRET not in read.text
    edited = await call(run, edit_file, path="innocent.txt", old_string=SECRET, new_string="x")
    assert edited.is_error and SECRET not in edited.text
    attached = await call(run, attach_file, path="innocent.txt")
    assert attached.is_error and "hard link" in attached.text and not attached.files
    found = await call(run, find_files, pattern="zebra-needle")
    assert SECRET not in found.text and "No matches" in found.text
    assert (vault / "key.txt").read_text() == f"{SECRET}\n"


async def test_ordinary_hard_links_in_the_workspace_still_read(run: RunContext, ws: Path) -> None:
    (ws / "a.txt").write_text("shared text\n")
    os.link(ws / "a.txt", ws / "b.txt")  # as uv or pnpm link files into a venv
    result = await call(run, read_file, path="b.txt")
    assert not result.is_error and "shared text" in result.text


async def test_find_files_from_above_the_home_leaves_out_the_vault_and_private_files(
    run: RunContext, ws: Path, vault: Path, tmp_path: Path
) -> None:
    home = run.home.root
    assert home.parent == tmp_path
    (ws / "ok.txt").write_text("zebra-needle in the workspace\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "found.txt").write_text("zebra-needle elsewhere\n")
    (home / "config.toml").write_text((home / "config.toml").read_text() + "# zebra-needle\n")
    memory = run.bot.memory_dir
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_text("zebra-needle in memory\n")
    (home / "routines").mkdir(exist_ok=True)
    (home / "routines" / "r.toml").write_text("# zebra-needle routine\n")
    for target in ("content", "files"):
        pattern = "zebra-needle" if target == "content" else "*"
        result = await call(run, find_files, pattern=pattern, path=str(tmp_path), target=target)
        text = result.text
        assert "ok.txt" in text and "found.txt" in text, text
        for private in ("key.txt", "config.toml", "MEMORY.md", "r.toml", SECRET):
            assert private not in text, (target, private)
        assert "were left out" not in text  # rg was told to skip them (the filter is the backstop)


async def test_find_files_inside_the_home_never_enters_the_vault(
    run: RunContext, vault: Path
) -> None:
    result = await call(run, find_files, pattern="zebra-needle", path=str(run.home.root))
    assert SECRET not in result.text and "key.txt" not in result.text
    refused = await call(run, find_files, pattern="x", path=str(vault))
    assert refused.is_error and "vault" in refused.text


async def test_the_result_filter_drops_what_a_glob_missed(
    run: RunContext, ws: Path, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.tools import search_files

    monkeypatch.setattr(search_files._FenceFilter, "globs", lambda self, root: [])
    result = await call(run, find_files, pattern="zebra-needle", path=str(tmp_path))
    assert SECRET not in result.text and "key.txt" not in result.text
    assert "were left out" in result.text


async def test_attach_file_sends_a_checked_copy_and_never_the_vault(
    run: RunContext, ws: Path, vault: Path
) -> None:
    (ws / "report.csv").write_text("a,b\n1,2\n")
    result = await call(run, attach_file, path="report.csv")
    [sent] = result.files
    assert sent.name == "report.csv" and sent.read_text() == "a,b\n1,2\n"
    assert Fence.for_run(run).area(sent.resolve()) == "own-scratch"
    refused = await call(run, attach_file, path=str(vault / "key.txt"))
    assert refused.is_error and "vault" in refused.text and not refused.files
    os.symlink(vault / "key.txt", ws / "link.txt")
    linked = await call(run, attach_file, path="link.txt")  # resolved: the vault
    assert linked.is_error and not linked.files


async def test_a_hard_link_to_the_homes_settings_is_refused(run: RunContext, ws: Path) -> None:
    os.link(run.home.root / "config.toml", ws / "copy.toml")
    result = await call(run, read_file, path="copy.toml")
    assert result.is_error and "hard link" in result.text


async def test_a_hard_link_made_after_a_recent_walk_is_still_refused(
    run: RunContext, ws: Path, vault: Path
) -> None:
    (ws / "a.txt").write_text("shared\n")
    os.link(ws / "a.txt", ws / "b.txt")
    assert not (await call(run, read_file, path="b.txt")).is_error  # walks the fenced trees
    os.link(vault / "key.txt", ws / "innocent.txt")  # the vault file had one link at the walk
    result = await call(run, read_file, path="innocent.txt")
    assert result.is_error and SECRET not in result.text


async def test_a_search_root_swapped_for_a_link_after_the_check_shows_nothing_of_the_vault(
    run: RunContext, ws: Path, vault: Path
) -> None:
    (ws / "notes").mkdir()
    gate = RuleGate(run.home, None, None)
    arguments = json.dumps({"pattern": "zebra-needle", "path": "notes"})
    decision = await settle(gate, ToolCall("c1", "find_files", arguments), find_files, run)
    assert isinstance(decision, Allow)
    (ws / "notes").rmdir()
    os.symlink(vault, ws / "notes")  # rg follows a link named as its root
    result = await REGISTRY.call(run, "find_files", arguments)
    assert SECRET not in result.text and "key.txt" not in result.text


async def test_the_homes_own_secrets_are_refused_by_the_gate_and_the_tools(
    run: RunContext, ws: Path
) -> None:
    """The dashboard's key and run/ (its one-time login links, sockets) are never reached, not
    even asked about: a yes would hand the model a login to the dashboard."""
    key = run.home.root / "dashboard.key"
    key.write_text(f"{SECRET}\n")
    links = run.home.root / "run" / "dashboard-logins.json"
    links.parent.mkdir(exist_ok=True)
    links.write_text(f'{{"hash": "{SECRET}"}}')
    gate = RuleGate(run.home, None, None)
    for target in (key, links):
        call_ = ToolCall("c1", "read_file", json.dumps({"path": str(target)}))
        decision = await gate.decide(call_, read_file, run)
        assert not isinstance(decision, Allow) and "secrets" in decision.reason, decision
        assert decision.rule == "files:secret"
        read = await call(run, read_file, path=str(target))
        assert read.is_error and SECRET not in read.text
    found = await call(run, find_files, pattern="zebra-needle", path=str(run.home.root))
    assert SECRET not in found.text
