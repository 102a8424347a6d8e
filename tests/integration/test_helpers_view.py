"""What ripgrep and the document converters open comes through the bot's view (issue 32, item 4):
a file the view hides is never grepped or converted, whether named, reached through a link in
the workspace (to a file or to a folder), or a hard link of it placed there. Real rg, real
markitdown, through the tool registry (the file tools' own checks, as a model's call)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from tests.helpers import make_home, run_context
from tests.unit.test_file_tools import docx_bytes

MARK = "H" + secrets.token_hex(5)  # made at run time: this file's text is never a leak


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunContext:
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    (person / ".ssh").mkdir(parents=True)
    (person / ".ssh/id_rsa").write_text(f"key {MARK}\n")
    (person / "private").mkdir()
    (person / "private/report.docx").write_bytes(docx_bytes(f"giraffe {MARK}"))
    made = make_home(person / ".atlas")
    home = Home(made.root)
    ctx = run_context(home)
    ws = ctx.bot.workspace
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "leak.txt").symlink_to(person / ".ssh/id_rsa")
    (ws / "keys").symlink_to(person / ".ssh")
    (ws / "report.docx").symlink_to(person / "private/report.docx")
    os.link(person / "private/report.docx", ws / "copy.docx")  # a hard link: the same file
    os.link(person / ".ssh/id_rsa", ws / "copy.txt")
    (ws / "own.txt").write_text("giraffe of the bot's own\n")
    return ctx


async def call(run: RunContext, name: str, **arguments: object) -> ToolResult:
    return await default_registry().call(run, name, json.dumps(arguments))


def converted(run: RunContext) -> str:
    folder = run.home.documents_dir
    return "".join(p.read_text() for p in folder.glob("*.md")) if folder.is_dir() else ""


async def test_ripgrep_never_searches_a_hidden_file(run: RunContext) -> None:
    for arguments in ({}, {"path": "keys"}, {"path": "leak.txt"}, {"path": "copy.txt"}):
        found = await call(run, "find_files", pattern=MARK, **arguments)
        assert MARK not in found.text.replace(f"{MARK!r}", ""), (arguments, found.text)
    listed = await call(run, "find_files", pattern="*", target="files")
    assert "id_rsa" not in listed.text and "copy.txt" not in listed.text, listed.text
    named = await call(run, "find_files", pattern="key", path="~/.ssh")
    assert named.is_error and "no such file" in named.text


async def test_a_hidden_document_is_never_converted(run: RunContext) -> None:
    found = await call(run, "find_files", pattern="giraffe")
    assert found.text.splitlines()[:-1] == ["own.txt:1:giraffe of the bot's own"], found.text
    for name in ("report.docx", "copy.docx"):
        read = await call(run, "read_file", path=name)
        assert read.is_error and MARK not in read.text, read.text
        searched = await call(run, "find_files", pattern="giraffe", path=name)
        assert MARK not in searched.text.replace(f"{MARK!r}", ""), searched.text
    assert MARK not in converted(run)  # nothing of it reached the documents cache
