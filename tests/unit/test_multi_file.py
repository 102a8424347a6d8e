"""Several files in one call (issue 21 item 9): read_file's `reads`, write_file's `files`,
edit_file's `edits`, each file applying or failing alone, every path judged by the gate as a
call of its own; and an edit whose new text is the old is a no-op that says so (item 8).
Every call goes as a model's does: the gate (settle), then the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.providers.base import ToolCall
from atlas.tools import files as files_module
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from atlas.trust.gate import ALLOW_ONCE, DENY, Allow, Deny, settle
from atlas.trust.policy import RuleGate
from tests.helpers import Person, make_home, run_context

REGISTRY = default_registry()


@pytest.fixture
def run(home_path: Path) -> RunContext:
    run = run_context(make_home(home_path))
    run.bot.workspace.mkdir(parents=True, exist_ok=True)
    return run


@pytest.fixture
def ws(run: RunContext) -> Path:
    return run.bot.workspace


async def model_call(run: RunContext, name: str, **arguments: object) -> ToolResult:
    """Judged by the gate, then run through the registry; a refusal comes back as the loop
    hands it to the model (an error result)."""
    raw = json.dumps(arguments)
    tool = REGISTRY.get(name)
    assert tool is not None
    decision = await settle(RuleGate(run.home, None, None), ToolCall("c1", name, raw), tool, run)
    if isinstance(decision, Deny):
        return ToolResult(f"Denied: {decision.reason}", is_error=True)
    assert isinstance(decision, Allow)
    return await REGISTRY.call(run, name, raw)


def sections(text: str) -> dict[str, str]:
    """The report's sections by their heading (`=== path ===` or `=== path (failed) ===`)."""
    found: dict[str, str] = {}
    for part in text.split("\n\n=== ")[1:]:
        heading, _, body = part.partition(" ===\n")
        found[heading] = body
    return found


async def test_reads_read_each_file_and_a_missing_one_fails_alone(
    run: RunContext, ws: Path
) -> None:
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "b.txt").write_text("one\ntwo\nthree\n")
    result = await model_call(
        run,
        "read_file",
        reads=[{"path": "a.txt"}, {"path": "gone.txt"}, {"path": "b.txt", "offset": 2, "limit": 1}],
    )
    assert not result.is_error
    assert result.text.startswith("2 of 3 files read; 1 failed")
    parts = sections(result.text)
    assert parts["a.txt"] == "     1\talpha\n     2\tbeta"
    assert "gone.txt: no such file" in parts["gone.txt (failed)"]
    assert parts["b.txt"].startswith("     2\ttwo\n… 1 more lines")
    assert str((ws / "a.txt").resolve()) in run.state.file_hashes  # read: now changeable
    assert str((ws / "b.txt").resolve()) in run.state.file_hashes


async def test_reads_share_one_page_and_a_file_that_does_not_fit_is_not_recorded(
    run: RunContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "MAX_PAGE_CHARS", 300)
    (ws / "small.txt").write_text("x" * 100 + "\n")
    (ws / "big.txt").write_text("y" * 250 + "\n")
    result = await model_call(run, "read_file", reads=[{"path": "small.txt"}, {"path": "big.txt"}])
    assert "read it in a call of its own" in sections(result.text)["big.txt (failed)"]
    assert str((ws / "big.txt").resolve()) not in run.state.file_hashes


async def test_reads_show_a_few_images_at_most(
    run: RunContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "MAX_BATCH_IMAGES", 1)
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    (ws / "one.png").write_bytes(png)
    (ws / "two.png").write_bytes(png)
    result = await model_call(run, "read_file", reads=[{"path": "one.png"}, {"path": "two.png"}])
    assert len(result.images) == 1
    assert "at most 1 images" in sections(result.text)["two.png (failed)"]


async def test_files_writes_each_and_an_unread_file_fails_alone(run: RunContext, ws: Path) -> None:
    (ws / "seen.txt").write_text("old\n")
    (ws / "unseen.txt").write_text("keep me\n")
    await model_call(run, "read_file", path="seen.txt")
    result = await model_call(
        run,
        "write_file",
        files=[
            {"path": "seen.txt", "content": "new\n"},
            {"path": "unseen.txt", "content": "clobbered\n"},
            {"path": "sub/fresh.txt", "content": "hello\n"},
        ],
    )
    assert result.text.startswith("2 of 3 files written; 1 failed")
    assert (ws / "seen.txt").read_text() == "new\n"
    assert (ws / "unseen.txt").read_text() == "keep me\n"
    assert (ws / "sub" / "fresh.txt").read_text() == "hello\n"
    assert "was not read in this conversation" in sections(result.text)["unseen.txt (failed)"]


async def test_edits_apply_file_by_file_each_file_all_or_none(run: RunContext, ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    (ws / "b.py").write_text("name = 'old'\n")
    await model_call(run, "read_file", reads=[{"path": "a.py"}, {"path": "b.py"}])
    result = await model_call(
        run,
        "edit_file",
        edits=[
            {"path": "a.py", "old_string": "x = 1", "new_string": "x = 10"},
            {"path": "b.py", "old_string": "old", "new_string": "new"},
            {"path": "./a.py", "old_string": "x = 10\ny = 2", "new_string": "x = 10\ny = 20"},
            {"path": "b.py", "old_string": "missing", "new_string": "z"},
        ],
    )
    assert result.text.startswith("1 of 2 files edited; 1 failed"), result.text
    assert (ws / "a.py").read_text() == "x = 10\ny = 20\n"  # the second edit saw the first
    assert (ws / "b.py").read_text() == "name = 'old'\n"  # its edits: all or none
    assert "edit 2 of 2: old_string not found in b.py" in result.text
    assert "the file is unchanged" in result.text
    assert "Edited a.py (2 replacements)" in result.text  # one write, one diff


async def test_a_file_named_twice_in_files_is_refused(run: RunContext, ws: Path) -> None:
    twice = [{"path": "t.txt", "content": "one\n"}, {"path": "./t.txt", "content": "two\n"}]
    result = await model_call(run, "write_file", files=twice)
    assert result.is_error and "./t.txt is named twice in files" in result.text
    assert not (ws / "t.txt").exists()


async def test_claude_codes_multiedit_shape_edits_one_file(run: RunContext, ws: Path) -> None:
    (ws / "m.txt").write_text("a b c\n")
    await model_call(run, "read_file", path="m.txt")
    edits = [{"old_string": "a", "new_string": "A"}, {"old_string": "c", "new_string": "C"}]
    result = await model_call(run, "edit_file", file_path="m.txt", edits=edits)
    assert result.text.startswith("1 of 1 files edited."), result.text
    assert (ws / "m.txt").read_text() == "A b C\n"
    lost = await model_call(run, "edit_file", edits=[{"old_string": "A", "new_string": "a"}])
    assert lost.is_error and "each of edits needs its path" in lost.text


async def test_an_edit_to_the_same_text_is_a_no_op_not_an_error(run: RunContext, ws: Path) -> None:
    (ws / "c.txt").write_text("same\n")
    result = await model_call(run, "edit_file", path="c.txt", old_string="same", new_string="same")
    assert not result.is_error
    assert (
        result.text
        == "c.txt unchanged: old_string and new_string are the same, so there is no edit"
    )
    assert (ws / "c.txt").read_text() == "same\n"


async def test_a_path_the_gate_refuses_fails_alone(run: RunContext, ws: Path) -> None:
    vault = run.home.root / "vault"
    vault.mkdir(exist_ok=True)
    (vault / "key.txt").write_text("s3cret\n")
    (ws / "ok.txt").write_text("fine\n")
    result = await model_call(
        run,
        "read_file",
        reads=[{"path": str(vault / "key.txt")}, {"path": "ok.txt"}],
    )
    assert "s3cret" not in result.text
    parts = sections(result.text)
    assert "refused by the approval gate" in parts[f"{vault / 'key.txt'} (failed)"]
    assert "inside the vault" in parts[f"{vault / 'key.txt'} (failed)"]
    assert parts["ok.txt"] == "     1\tfine"
    written = await model_call(
        run,
        "write_file",
        files=[{"path": "/etc/atlas-test.conf", "content": "x"}, {"path": "n.txt", "content": "y"}],
    )
    assert "system path" in sections(written.text)["/etc/atlas-test.conf (failed)"]
    assert (ws / "n.txt").read_text() == "y"
    every = await model_call(run, "write_file", files=[{"path": "/etc/a", "content": "x"}] * 2)
    assert every.is_error and "system path" in every.text


async def test_a_path_that_needs_asking_is_still_asked(run: RunContext, ws: Path) -> None:
    mission = run.bot.root / "MISSION.md"
    before = mission.read_text() if mission.exists() else None
    run.ask = person = Person(DENY)
    denied = await model_call(
        run,
        "write_file",
        files=[{"path": "plain.txt", "content": "a"}, {"path": str(mission), "content": "b"}],
    )
    assert denied.is_error and "the user denied it" in denied.text
    assert len(person.asked) == 1 and str(mission) in person.asked[0][0]
    assert not (ws / "plain.txt").exists()  # a refused question stops the whole call
    assert (mission.read_text() if mission.exists() else None) == before
    run.ask = Person(ALLOW_ONCE)
    if before is not None:
        await model_call(run, "read_file", path=str(mission))
    allowed = await model_call(
        run,
        "write_file",
        files=[{"path": "plain.txt", "content": "a"}, {"path": str(mission), "content": "b"}],
    )
    assert allowed.text.startswith("2 of 2 files written."), allowed.text
    assert mission.read_text() == "b"


async def test_a_call_whose_every_entry_fails_is_an_error(run: RunContext) -> None:
    result = await model_call(run, "read_file", reads=[{"path": "no1"}, {"path": "no2"}])
    assert result.is_error and result.text.startswith("Error: 0 of 2 files read; 2 failed")
    assert "no1: no such file" in result.text and "no2: no such file" in result.text


async def test_one_shape_at_a_time(run: RunContext, ws: Path) -> None:
    both = await model_call(run, "read_file", path="a", reads=[{"path": "b"}])
    assert both.is_error and "either path or reads, not both" in both.text
    neither = await model_call(run, "edit_file")
    assert neither.is_error and "path is required (or edits" in neither.text
    no_content = await model_call(run, "write_file", path="x.txt")
    assert no_content.is_error and "content is required" in no_content.text
    assert not (ws / "x.txt").exists()
    no_new = await model_call(run, "edit_file", path="x.txt", old_string="a")
    assert no_new.is_error and "new_string is required" in no_new.text
