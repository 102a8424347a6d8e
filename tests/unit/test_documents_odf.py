"""read_file reads OpenDocument (.odt, .ods, .odp) and RTF as text (issue 21 item 6): real files
written with odfdo itself, read the way a model's call goes (the gate, then the registry)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from odfdo import Cell, Document, DrawPage, Frame, Header, List, Paragraph, Row, Table

from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.tools import office_text
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from atlas.trust.gate import Allow, settle
from atlas.trust.policy import RuleGate
from tests.helpers import run_context

REGISTRY = default_registry()


@pytest.fixture
def run(home: Home) -> RunContext:
    ctx = run_context(home)
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


@pytest.fixture
def ws(run: RunContext) -> Path:
    return run.bot.workspace


async def model_call(run: RunContext, name: str, **arguments: object) -> ToolResult:
    """A call as the model's goes: judged by the gate, then run through the registry."""
    raw = json.dumps(arguments)
    tool = REGISTRY.get(name)
    assert tool is not None
    decision = await settle(RuleGate(run.home, None, None), ToolCall("c1", name, raw), tool, run)
    assert isinstance(decision, Allow), decision
    return await REGISTRY.call(run, name, raw)


def empty(kind: str) -> Document:
    document = Document(kind)
    document.body.clear()  # the template's own empty sheet or slide
    return document


def lines_of(result: ToolResult) -> list[str]:
    """The page's text lines without their `cat -n` numbers."""
    return [line.split("\t", 1)[1] for line in result.text.splitlines()[1:] if "\t" in line]


async def test_a_text_document_reads_as_markdown(run: RunContext, ws: Path) -> None:
    document = empty("text")
    document.body.append(Header(1, "Giraffe report"))
    document.body.append(Paragraph("Necks are long this quarter."))
    document.body.append(List(["first point", "second point"]))
    document.save(ws / "report.odt")
    result = await model_call(run, "read_file", path="report.odt")
    assert not result.is_error, result.text
    assert result.text.startswith("report.odt as Markdown:")
    lines = lines_of(result)
    assert "# Giraffe report" in lines and "Necks are long this quarter." in lines
    assert any(line.strip() == "-  first point" for line in lines), lines
    assert result.untrusted  # a document's text is data
    assert str((ws / "report.odt").resolve()) in run.state.file_hashes


async def test_a_spreadsheet_reads_as_a_table_per_sheet(run: RunContext, ws: Path) -> None:
    document = empty("spreadsheet")
    fruit = Table("Fruit")
    fruit.set_values([["name", "count"], ["okapi | apple", 4], ["pear", 7]])
    document.body.append(fruit)
    notes = Table("Notes")
    notes.set_value("A1", "remember")
    filler = Row()  # as LibreOffice saves them: the sheet's empty rest folded into one repeat
    filler.set_attribute("table:number-rows-repeated", "1048570")
    blank = Cell()
    blank.set_attribute("table:number-columns-repeated", "1024")
    filler.append(blank)
    notes.append(filler)
    document.body.append(notes)
    document.save(ws / "stock.ods")
    started = time.monotonic()
    result = await model_call(run, "read_file", path="stock.ods")
    assert time.monotonic() - started < 10  # the folded rows are a count, not a million rows
    assert lines_of(result) == [
        "## Sheet: Fruit",
        "",
        "| name | count |",
        "|---|---|",
        "| okapi \\| apple | 4 |",
        "| pear | 7 |",
        "",
        "## Sheet: Notes",
        "",
        "| remember |",
        "|---|",
    ]


async def test_a_presentation_reads_slide_by_slide(run: RunContext, ws: Path) -> None:
    document = empty("presentation")
    for number, (name, text) in enumerate([("Intro", "Hello zebra"), ("Plan", "Feed okapi")], 1):
        page = DrawPage(f"p{number}", name=name)
        page.append(Frame.text_frame(text, size=("10cm", "2cm"), position=("1cm", "1cm")))
        document.body.append(page)
    document.save(ws / "deck.odp")
    result = await model_call(run, "read_file", path="deck.odp")
    assert lines_of(result) == [
        "## Slide 1: Intro",
        "",
        "Hello zebra",
        "",
        "## Slide 2: Plan",
        "",
        "Feed okapi",
    ]


async def test_rtf_reads_as_text_not_markup(run: RunContext, ws: Path) -> None:
    rtf = (
        r"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0 Helvetica;}}"
        "\n"
        r"\f0\fs24 Caf\'e9 menu\par"
        "\n"
        r"{\b Bold} tapir\par}"
    )
    (ws / "menu.rtf").write_text(rtf, encoding="ascii")
    result = await model_call(run, "read_file", path="menu.rtf")
    assert lines_of(result) == ["Café menu", "Bold tapir"]
    assert "\\rtf1" not in result.text


async def test_find_files_searches_inside_opendocument(run: RunContext, ws: Path) -> None:
    document = empty("text")
    document.body.append(Paragraph("the narwhal clause"))
    document.save(ws / "contract.odt")
    result = await model_call(run, "find_files", pattern="narwhal")
    assert "contract.odt" in result.text and "narwhal clause" in result.text


async def test_a_broken_or_bomb_document_is_refused_with_its_reason(
    run: RunContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "broken.ods").write_bytes(b"not a zip at all")
    broken = await model_call(run, "read_file", path="broken.ods")
    assert broken.is_error and "broken.ods: not an OpenDocument file" in broken.text
    document = empty("text")
    document.body.append(Paragraph("x" * 5000))
    document.save(ws / "big.odt")
    monkeypatch.setattr(office_text, "MAX_UNPACKED_BYTES", 4000)
    bomb = await model_call(run, "read_file", path="big.odt")
    assert bomb.is_error and "big.odt: unpacks to" in bomb.text
    assert "over the limit of 4000 bytes" in bomb.text
