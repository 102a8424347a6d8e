"""find_files's ignore rules, matched in-process (atlas/tools/ignore_rules.py): .gitignore honoured
inside and outside a repository, the rules above the searched folder applied to its results,
and every ignore file read through the bot's view (a link to a hidden file is not read)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from atlas.home import Home
from atlas.sandbox.view import View
from atlas.tools.catalog import default_registry
from atlas.tools.ignore_rules import IgnoreRules, read_through_view
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.search_files import _ripgrep
from atlas.tools.search_scope import scope_flags
from tests.helpers import BASE_CONFIG, make_home, run_context


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunContext:
    person = tmp_path / "person"
    person.mkdir()
    monkeypatch.setenv("HOME", str(person))
    made = make_home(tmp_path / "atlas-home")
    ctx = run_context(Home(made.root))
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


async def find(run: RunContext, **arguments: Any) -> list[str]:
    result: ToolResult = await default_registry().call(run, "find_files", json.dumps(arguments))
    assert not result.is_error, result.text
    return result.text.splitlines()[:-1]


def listing(argv: list[str], cwd: Path) -> str:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True).stdout


def git_init(ws: Path) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True)


def tree(ws: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(text)


async def test_a_gitignore_outside_a_repository_is_honoured(run: RunContext) -> None:
    ws = run.bot.workspace
    tree(ws, {".gitignore": "*.log\nout/\n", "a.txt": "needle\n", "b.log": "needle\n",
              "out/c.txt": "needle\n"})  # fmt: skip
    assert await find(run, pattern="needle") == ["a.txt:1:needle"]
    assert await find(run, pattern="*.txt", target="files") == ["a.txt"]
    # Inside an ignored folder, its files are found (the path names it).
    assert await find(run, pattern="needle", path="out") == ["out/c.txt:1:needle"]


@pytest.mark.parametrize("git", [True, False])
async def test_the_rules_above_the_searched_folder_apply_below_it(
    run: RunContext, git: bool
) -> None:
    ws = run.bot.workspace
    if git:
        git_init(ws)
    tree(ws, {".gitignore": "*.log\ngen/\n!keep.log\n", "src/a.txt": "needle\n",
              "src/b.log": "needle\n", "src/keep.log": "needle\n", "src/gen/c.txt": "needle\n",
              "src/.gitignore": "a2.txt\n", "src/a2.txt": "needle\n"})  # fmt: skip
    found = await find(run, pattern="needle", path="src")
    assert found == ["src/a.txt:1:needle", "src/keep.log:1:needle"]
    assert await find(run, pattern="needle", path="src/gen") == ["src/gen/c.txt:1:needle"]


async def test_info_exclude_is_honoured_and_a_deeper_file_decides(run: RunContext) -> None:
    ws = run.bot.workspace
    git_init(ws)
    (ws / ".git/info").mkdir(exist_ok=True)
    (ws / ".git/info/exclude").write_text("secret.txt\n")
    tree(ws, {"lib/secret.txt": "needle\n", "lib/x.txt": "needle\n", ".gitignore": "*.txt\n",
              "lib/sub/.gitignore": "!*.txt\n", "lib/sub/y.txt": "needle\n"})  # fmt: skip
    view = View.of(run.home, run.bot)
    rules = IgnoreRules.around(view, ws.resolve() / "lib", ws.resolve())
    assert rules is not None
    assert rules.ignored(ws.resolve() / "lib/secret.txt", False)
    assert rules.ignored(ws.resolve() / "lib/x.txt", False)
    assert not rules.ignored(ws.resolve() / "lib/sub/y.txt", False)
    assert not rules.ignored(ws.resolve() / "lib", True)
    assert rules.ignored(ws.resolve() / ".git/config", False)


async def test_an_ignore_file_linked_to_a_hidden_file_is_not_read(run: RunContext) -> None:
    """A `.gitignore` that is a link into the hidden home: matching it would answer, file by
    file, whether a pattern is in the hidden file (an oracle on its content)."""
    ws = run.bot.workspace
    person = Path(os.environ["HOME"])
    (person / ".ssh").mkdir()
    (person / ".ssh/id_rsa").write_text("*.txt\n")
    (person / "notes").write_text("*.txt\n")  # the emptied home: hidden too
    git_init(ws)
    tree(ws, {"src/a.txt": "needle\n", "lib/b.txt": "needle\n"})
    (ws / ".gitignore").symlink_to(person / ".ssh/id_rsa")
    (ws / "src/.gitignore").symlink_to(person / "notes")
    view = View.of(run.home, run.bot)
    assert read_through_view(view, ws / ".gitignore") is None
    assert read_through_view(view, ws / "src/.gitignore") is None
    assert await find(run, pattern="needle", path="lib") == ["lib/b.txt:1:needle"]
    assert await find(run, pattern="needle") == ["lib/b.txt:1:needle", "src/a.txt:1:needle"]


async def test_no_git_runs_for_the_ignore_rules(
    run: RunContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `git` first on the PATH leaves a mark if anything starts it: the search of an ignored
    folder inside a repository (what `git check-ignore` answered before) must not. The sandbox
    off: a sandboxed git could leave no mark outside its read-only view."""
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[sandbox]\nenabled = false\n"
    made = make_home(tmp_path / "unsandboxed", config=config)
    run = run_context(Home(made.root))
    ws = run.bot.workspace
    ws.mkdir(parents=True, exist_ok=True)
    git_init(ws)
    tree(ws, {".gitignore": "build/\n", "build/out.txt": "needle\n", "a.txt": "needle\n"})
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    mark = tmp_path / "git-ran"
    (fake / "git").write_text(f'#!/bin/sh\necho "$@" >> "{mark}"\nexit 1\n')
    (fake / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert await find(run, pattern="needle", path="build") == ["build/out.txt:1:needle"]
    assert await find(run, pattern="needle") == ["a.txt:1:needle"]
    assert not mark.exists(), mark.read_text()


async def test_rg_skips_ignored_folders_without_going_in(run: RunContext) -> None:
    """The rules down to the searched folder reach rg as an ignore file of Atlas's own, so a big
    ignored folder is not read to be filtered after; a negation anywhere turns that off."""
    ws = run.bot.workspace.resolve()
    git_init(ws)
    tree(ws, {".gitignore": "data/\n/only-top.txt\n*.log\n", "src/.gitignore": "gen/\n",
              "data/big.txt": "needle\n", "src/a.txt": "needle\n"})  # fmt: skip
    view = View.of(run.home, run.bot)
    rules = IgnoreRules.around(view, ws / "src", ws)
    assert rules.prune_patterns(ws / "src", ws) == ["data/", "/only-top.txt", "*.log",
                                                    "/src/**/gen/"]  # fmt: skip
    assert rules.prune_patterns(ws / "src", ws / "src") == ["data/", "*.log", "gen/"]
    scope = await scope_flags(run, ws, True, "", ws)
    given = [flag for flag in scope.flags if flag.startswith("--ignore-file=")]
    assert len(given) == 1
    rg = [_ripgrep(), "--no-config", "--files", *scope.flags, "."]
    listed = listing(rg, ws)
    assert "data/big.txt" not in listed and "src/a.txt" in listed  # rg itself skipped data/
    scope.close()
    assert not Path(given[0].removeprefix("--ignore-file=")).exists()
    (ws / "src/.gitignore").write_text("gen/\n!keep.log\n")
    again = IgnoreRules.around(view, ws / "src", ws)
    assert again.prune_patterns(ws / "src", ws) == []  # something re-included: no pruning
    assert await find(run, pattern="needle") == ["src/a.txt:1:needle"]
