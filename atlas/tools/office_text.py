"""OpenDocument (.odt, .ods, .odp) and RTF as Markdown, for the formats markitdown has no
converter for: odfdo reads OpenDocument, striprtf reads RTF.

A text document comes as odfdo's Markdown; a spreadsheet as a table per sheet; a presentation
as its text per slide. Spreadsheet rows are walked here, not by odfdo's own export: odfdo
expands a repeated row or cell into copies (minutes for a sheet LibreOffice saved with its empty
rows folded into one repeat), while a repeat is only a count. Both formats come from anyone:
what a zip may unpack to is checked before any XML is parsed.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import ToolError

if TYPE_CHECKING:
    from odfdo import Document, Element

OPENDOCUMENT_SUFFIXES = (".odt", ".ods", ".odp")
RTF_SUFFIXES = (".rtf",)
MAX_UNPACKED_BYTES = 200 * 1024 * 1024  # a zip's members, unpacked: past this it is a zip bomb
MAX_SHEET_CELLS = 200_000  # cells written for one spreadsheet; the rest is counted, not shown
MAX_REPEATED_COLUMNS = 1024  # a cell repeated across more columns than this is trailing filler


def opendocument_markdown(path: Path, data: bytes) -> str:
    """The Markdown of an OpenDocument file's bytes (`path` names it in messages)."""
    _check_unpacked_size(path, data)
    from odfdo import Document  # loaded only when an OpenDocument file is read

    document = Document(io.BytesIO(data))
    kind = document.get_type().removesuffix("-template")
    if kind == "spreadsheet":
        return _spreadsheet(document)
    if kind == "presentation":
        return _presentation(document)
    if kind == "text":
        markdown = document.to_markdown()
        return markdown if isinstance(markdown, str) else ""
    raise ToolError(f"{path}: OpenDocument of kind {kind!r} has no text reader")


def rtf_text(data: bytes) -> str:
    """The text of an RTF file. RTF itself is 7-bit: its other characters are escapes that
    name their code page, so latin-1 only keeps the bytes as they are for striprtf."""
    from striprtf.striprtf import rtf_to_text

    return rtf_to_text(data.decode("latin-1"), errors="replace")


def _check_unpacked_size(path: Path, data: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        raise ToolError(f"{path}: not an OpenDocument file (it is not a zip archive)") from None
    if unpacked > MAX_UNPACKED_BYTES:
        raise ToolError(
            f"{path}: unpacks to {unpacked} bytes, over the limit of {MAX_UNPACKED_BYTES} "
            "bytes for a document (a zip bomb, or a document too large to read)"
        )


# ---- spreadsheets: a Markdown table per sheet ---------------------------------------------


def _spreadsheet(document: Document) -> str:
    budget = [MAX_SHEET_CELLS]
    parts: list[str] = []
    for table in document.body.tables:
        rows = list(_sheet_rows(table, budget))
        parts.append(f"## Sheet: {table.name or '(unnamed)'}\n\n{_markdown_table(rows)}")
    if budget[0] <= 0:
        parts.append(f"(cut: only the first {MAX_SHEET_CELLS} cells are shown)")
    return "\n\n".join(parts) + "\n"


def _sheet_rows(table: Element, budget: list[int]) -> Iterator[list[str]]:
    """The sheet's rows as cell texts, repeats counted out; empty rows at the end and empty
    cells at a row's end left out; at most `budget[0]` cells in all."""
    empty_rows = 0
    for row in table.xpath("descendant::table:table-row"):
        cells = _row_cells(row)
        repeat = row.repeated or 1
        if not cells:
            empty_rows += repeat
            continue
        for _ in range(min(empty_rows, budget[0])):  # empty rows between filled ones stay
            budget[0] -= 1
            yield []
        empty_rows = 0
        for _ in range(repeat):
            if budget[0] <= 0:
                return
            budget[0] -= len(cells)
            yield cells


def _row_cells(row: Element) -> list[str]:
    cells: list[str] = []
    pending_empty = 0
    for cell in row.xpath("table:table-cell|table:covered-table-cell"):
        text = _cell_text(cell)
        repeat = cell.repeated or 1
        if not text:
            pending_empty += repeat
            continue
        cells.extend([""] * pending_empty)
        pending_empty = 0
        cells.extend([text] * min(repeat, MAX_REPEATED_COLUMNS))
    return cells


def _cell_text(cell: Element) -> str:
    paragraphs = [p.text_recursive for p in cell.xpath("text:p")]
    return " ".join(p.strip() for p in paragraphs if p and p.strip())


def _markdown_table(rows: list[list[str]]) -> str:
    if not rows:
        return "(empty)"
    width = max(len(row) for row in rows)

    def line(row: list[str]) -> str:
        cells = [_escape_cell(c) for c in row] + [""] * (width - len(row))
        return "| " + " | ".join(cells) + " |"

    header, *body = rows
    return "\n".join([line(header), "|" + "---|" * width, *(line(row) for row in body)])


def _escape_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


# ---- presentations: the text of each slide ------------------------------------------------


def _presentation(document: Document) -> str:
    parts: list[str] = []
    for number, page in enumerate(document.body.get_draw_pages(), 1):
        lines = [line.strip() for line in page.get_formatted_text().splitlines()]
        text = "\n".join(line for line in lines if line)
        title = f"## Slide {number}" + (f": {page.name}" if page.name else "")
        parts.append(f"{title}\n\n{text or '(no text)'}")
    return "\n\n".join(parts) + "\n"
