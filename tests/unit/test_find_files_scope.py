"""find_files through the registry, with the arguments as a model sends them (raw JSON): the
dependency and build folders it skips unless the path names them, and Grep's `-A`, `-B`,
`type` and `multiline`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlas.home import Home
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.search_scope import SKIPPED_FOLDERS
from tests.helpers import run_context
from tests.unit.test_file_tools import pdf_bytes


@pytest.fixture
def run(home: Home) -> RunContext:
    ctx = run_context(home)
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


@pytest.fixture
def ws(run: RunContext) -> Path:
    return run.bot.workspace


async def find(run: RunContext, **arguments: Any) -> ToolResult:
    return await default_registry().call(run, "find_files", json.dumps(arguments))


def lines(result: ToolResult) -> list[str]:
    assert not result.is_error, result.text
    return result.text.splitlines()[:-1]  # the last line is the summary


@pytest.fixture
def project(ws: Path) -> Path:
    """A project outside git (no .gitignore helps) with its dependencies and builds in it."""
    for folder in ("node_modules/left-pad", ".venv/lib", "app/__pycache__", "dist", "target/debug"):
        (ws / folder).mkdir(parents=True)
        (ws / folder / "x.txt").write_text("needle\n")
    (ws / "app/node_modules").mkdir()
    (ws / "app/node_modules/deep.txt").write_text("needle\n")
    (ws / "app/main.txt").write_text("needle\n")
    return ws


async def test_dependency_and_build_folders_are_skipped(run: RunContext, project: Path) -> None:
    assert lines(await find(run, pattern="needle")) == ["app/main.txt:1:needle"]
    names = lines(await find(run, pattern="*.txt", target="files"))
    assert names == ["app/main.txt"]
    listed = lines(await find(run, pattern="needle", output_mode="files_only", glob="*.txt"))
    assert listed == ["app/main.txt"]  # the model's glob does not bring them back


async def test_a_path_that_names_the_folder_searches_it(run: RunContext, project: Path) -> None:
    inside = lines(await find(run, pattern="needle", path="node_modules"))
    assert inside == ["node_modules/left-pad/x.txt:1:needle"]
    deeper = lines(await find(run, pattern="needle", path="app/node_modules/"))
    assert deeper == ["app/node_modules/deep.txt:1:needle"]
    build = lines(await find(run, pattern="*.txt", target="files", path="target"))
    assert build == ["target/debug/x.txt"]


async def test_skipped_folders_inside_a_hidden_search_stay_skipped(
    run: RunContext, ws: Path
) -> None:
    (ws / ".config/tool/node_modules").mkdir(parents=True)
    (ws / ".config/tool/node_modules/x.txt").write_text("needle\n")
    (ws / ".config/tool/settings.txt").write_text("needle\n")
    found = lines(await find(run, pattern="needle", path=".config"))
    assert found == [".config/tool/settings.txt:1:needle"]


def test_the_reference_folders_are_in_the_list() -> None:
    assert {"node_modules", ".venv", "__pycache__", "dist", "target", "AppData"} <= set(
        SKIPPED_FOLDERS
    )


@pytest.fixture
def notes(ws: Path) -> Path:
    (ws / "notes.txt").write_text("1\n2\n3\nneedle\n5\n6\n7\n")
    return ws


async def test_grep_after_and_before_context(run: RunContext, notes: Path) -> None:
    after = lines(await find(run, pattern="needle", **{"-A": 2}))
    assert after == ["notes.txt:4:needle", "notes.txt-5-5", "notes.txt-6-6"]
    before = lines(await find(run, pattern="needle", **{"-B": 1}))
    assert before == ["notes.txt-3-3", "notes.txt:4:needle"]
    both = lines(await find(run, pattern="needle", context_before=1, **{"-C": 0, "-A": 1}))
    assert both == ["notes.txt-3-3", "notes.txt:4:needle", "notes.txt-5-5"]
    wider = lines(await find(run, pattern="needle", context=1, **{"-A": 2}))
    assert wider == ["notes.txt-3-3", "notes.txt:4:needle", "notes.txt-5-5", "notes.txt-6-6"]
    refused = await find(run, pattern="needle", **{"-A": 11})
    assert refused.is_error and "context_after" in refused.text


async def test_grep_type(run: RunContext, ws: Path) -> None:
    (ws / "a.py").write_text("needle\n")
    (ws / "b.js").write_text("needle\n")
    assert lines(await find(run, pattern="needle", type="py")) == ["a.py:1:needle"]
    names = await find(run, pattern="*", target="files", file_type="js")
    assert names.is_error and "with target=files put the glob in pattern" in names.text
    (ws / "paper.pdf").write_bytes(pdf_bytes("needle in a document"))
    assert lines(await find(run, pattern="needle", type="py")) == ["a.py:1:needle"]
    assert lines(await find(run, pattern="needle", type="pdf")) == [
        "paper.pdf:1:needle in a document"
    ]
    unknown = await find(run, pattern="needle", type="nonsense")
    assert unknown.is_error and "unrecognized file type: nonsense" in unknown.text


async def test_grep_multiline(run: RunContext, ws: Path) -> None:
    (ws / "code.txt").write_text("def start(\n    x,\n):\nother\n")
    assert lines(await find(run, pattern=r"start\(.*\):")) == []
    spanning = lines(await find(run, pattern=r"start\(.*?\):", multiline=True))
    assert spanning == ["code.txt:1:def start(", "code.txt:2:    x,", "code.txt:3:):"]
