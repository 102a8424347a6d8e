"""read_file, write_file, edit_file and find_files, called through the registry (argument parsing
included), against real files in a temporary workspace."""

from __future__ import annotations

import base64
import io
import os
import shutil
import stat
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import pytest

from atlas.home import Home
from atlas.tools import documents, files, search_files
from atlas.tools.files import FILE_TOOLS, edit_file, read_file, write_file
from atlas.tools.registry import RunContext
from atlas.tools.search_files import find_files
from tests.helpers import run_context


@pytest.fixture
def run(home: Home) -> RunContext:
    ctx = run_context(home)
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


@pytest.fixture
def ws(run: RunContext) -> Path:
    return run.bot.workspace


def png_bytes(width: int = 1, height: int = 1, padding: int = 0) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + b"\xff\x00\x00" * width)
    extra = chunk(b"tEXt", b"c\x00" + b"x" * padding) if padding else b""
    ihdr = chunk(b"IHDR", header)
    idat = chunk(b"IDAT", pixels)
    return b"\x89PNG\r\n\x1a\n" + ihdr + extra + idat + chunk(b"IEND", b"")


def pdf_bytes(text: str) -> bytes:
    """A one-page PDF with `text` in Helvetica, written by hand (offsets in the xref are real)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def docx_bytes(*paragraphs: str) -> bytes:
    """A minimal .docx (python-docx is not installed; mammoth reads this)."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-'
            'package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
            'officedocument.wordprocessingml.document.main+xml"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
            '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
            'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
            "</Relationships>",
        )
        z.writestr(
            "word/document.xml", f'<w:document xmlns:w="{w}"><w:body>{body}</w:body></w:document>'
        )
    return buf.getvalue()


async def call(run: RunContext, tool, **arguments):  # type: ignore[no-untyped-def]
    return await tool.invoke(run, arguments)


# ---- read_file --------------------------------------------------------------------------------


async def test_read_numbers_lines_and_says_where_to_go_on(run: RunContext, ws: Path) -> None:
    (ws / "ten.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    first = await call(run, read_file, path="ten.txt", limit=3)
    assert not first.is_error
    assert first.text.splitlines() == [
        "     1\tline 1",
        "     2\tline 2",
        "     3\tline 3",
        "… 7 more lines; call read_file with offset=4",
    ]
    rest = await call(run, read_file, path="ten.txt", offset=9)
    assert rest.text.splitlines() == ["     9\tline 9", "    10\tline 10"]


async def test_read_stops_at_the_character_budget(run: RunContext, ws: Path) -> None:
    (ws / "wide.txt").write_text(("x" * 1000 + "\n") * 150)
    result = await call(run, read_file, path="wide.txt")
    last = result.text.splitlines()[-1]
    shown = len(result.text.splitlines()) - 1
    assert shown < 150 and len(result.text) <= files.MAX_PAGE_CHARS + 200
    assert last == f"… {150 - shown} more lines; call read_file with offset={shown + 1}"


async def test_read_cuts_a_very_long_line(run: RunContext, ws: Path) -> None:
    (ws / "long.txt").write_text("y" * 5000 + "\nshort\n")
    text = (await call(run, read_file, path="long.txt")).text
    first, second = text.splitlines()
    assert first == "     1\t" + "y" * 2000 + "… [line cut: 3000 more characters]"
    assert second == "     2\tshort"


async def test_read_past_the_end_and_missing_files_are_errors(run: RunContext, ws: Path) -> None:
    (ws / "two.txt").write_text("a\nb\n")
    past = await call(run, read_file, path="two.txt", offset=5)
    assert past.is_error and "offset 5 is past the end of two.txt (2 lines)" in past.text
    missing = await call(run, read_file, path="nope.txt")
    assert missing.is_error and "nope.txt: no such file" in missing.text
    too_many = await call(run, read_file, path="two.txt", limit=2001)
    assert too_many.is_error and "limit" in too_many.text


async def test_read_refuses_binary_files(run: RunContext, ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"ELF\x00\x01\x02" * 10)
    result = await call(run, read_file, path="blob.bin")
    assert result.is_error and "blob.bin is a binary file" in result.text
    assert str((ws / "blob.bin").resolve()) not in run.state.file_hashes


async def test_read_shows_invalid_utf8_and_edit_refuses_it(run: RunContext, ws: Path) -> None:
    (ws / "latin.txt").write_bytes(b"fine\ncaf\xe9\n")
    result = await call(run, read_file, path="latin.txt")
    assert "     2\tcaf\ufffd" in result.text
    assert result.text.endswith("(not valid UTF-8 at line 2; undecodable bytes shown as \ufffd)")
    edit = await call(run, edit_file, path="latin.txt", old_string="fine", new_string="ok")
    assert edit.is_error and "latin.txt is not UTF-8 text (byte 8)" in edit.text
    assert (ws / "latin.txt").read_bytes() == b"fine\ncaf\xe9\n"


async def test_read_records_the_hash_of_the_file(run: RunContext, ws: Path) -> None:
    import hashlib

    (ws / "h.txt").write_bytes(b"abc\r\ndef")
    await call(run, read_file, path="h.txt", limit=1)
    assert (
        run.state.file_hashes[str((ws / "h.txt").resolve())]
        == hashlib.sha256(b"abc\r\ndef").hexdigest()
    )


async def test_read_image_for_a_model_that_sees_images(run: RunContext, ws: Path) -> None:
    data = png_bytes()
    (ws / "dot.png").write_bytes(data)
    result = await call(run, read_file, path="dot.png")
    assert not result.is_error
    assert result.images[0].media_type == "image/png"
    assert base64.b64decode(result.images[0].data_b64) == data
    assert "dot.png" in result.text


async def test_read_image_for_a_model_that_cannot(run: RunContext, ws: Path) -> None:
    (ws / "dot.png").write_bytes(png_bytes())
    run.supports_images = False
    result = await call(run, read_file, path="dot.png")
    assert not result.is_error and not result.images
    assert "cannot see images" in result.text


async def test_read_refuses_images_over_5_mb(run: RunContext, ws: Path) -> None:
    (ws / "big.png").write_bytes(png_bytes(padding=5 * 1024 * 1024))
    result = await call(run, read_file, path="big.png")
    assert result.is_error and "over 5 MB" in result.text and not result.images


async def test_read_documents_as_markdown(run: RunContext, ws: Path) -> None:
    import openpyxl

    (ws / "memo.docx").write_bytes(docx_bytes("Quarterly giraffe report", "Second paragraph"))
    (ws / "paper.pdf").write_bytes(pdf_bytes("Hello zebra"))
    book = openpyxl.Workbook()
    book.active["A1"] = "okapi count"
    book.save(ws / "sheet.xlsx")

    docx = await call(run, read_file, path="memo.docx")
    assert docx.text.splitlines()[:2] == [
        "memo.docx as Markdown:",
        "     1\tQuarterly giraffe report",
    ]
    pdf = await call(run, read_file, path="paper.pdf")
    assert "\tHello zebra" in pdf.text
    xlsx = await call(run, read_file, path="sheet.xlsx", offset=2, limit=1)
    assert "     2\t| okapi count |" in xlsx.text and "call read_file with offset=3" in xlsx.text
    assert str((ws / "memo.docx").resolve()) in run.state.file_hashes
    assert docx.untrusted and pdf.untrusted  # documents reach the model marked as data
    (ws / "plain.txt").write_text("mine")
    assert not (await call(run, read_file, path="plain.txt")).untrusted


async def test_read_refuses_documents_it_cannot_convert(run: RunContext, ws: Path) -> None:
    (ws / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0 not really")
    result = await call(run, read_file, path="old.doc")
    assert result.is_error and ".doc files cannot be converted" in result.text


async def test_file_path_alias_and_disagreeing_aliases(run: RunContext, ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("beta\n")
    aliased = await call(run, read_file, file_path="a.txt")
    assert "alpha" in aliased.text
    clash = await call(run, read_file, file_path="a.txt", path="b.txt")
    assert clash.is_error and "disagree" in clash.text


async def test_relative_paths_resolve_to_the_workspace(
    run: RunContext, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the process's own folder must not matter
    (tmp_path / "here.txt").write_text("wrong one\n")
    (ws / "here.txt").write_text("right one\n")
    assert "right one" in (await call(run, read_file, path="here.txt")).text
    absolute = await call(run, read_file, path=str(tmp_path / "here.txt"))
    assert "wrong one" in absolute.text


# ---- write_file -------------------------------------------------------------------------------


async def test_write_creates_folders_atomically(run: RunContext, ws: Path) -> None:
    result = await call(run, write_file, path="deep/er/new.txt", content="one\ntwo\n")
    assert result.text == "Created deep/er/new.txt: 2 lines, 8 bytes"
    assert (ws / "deep/er/new.txt").read_text() == "one\ntwo\n"
    assert os.listdir(ws / "deep/er") == ["new.txt"]  # no temp file left behind
    mode = stat.S_IMODE((ws / "deep/er/new.txt").stat().st_mode)
    assert mode == files.NEW_FILE_MODE  # not mkstemp's 0600
    # Written by us, so it counts as seen: a second write needs no read.
    again = await call(run, write_file, path="deep/er/new.txt", content="three\n")
    assert not again.is_error and (ws / "deep/er/new.txt").read_text() == "three\n"


async def test_write_refuses_a_file_not_read(run: RunContext, ws: Path) -> None:
    (ws / "keep.txt").write_text("precious\n")
    result = await call(run, write_file, path="keep.txt", content="gone\n")
    assert result.is_error and "keep.txt exists but was not read" in result.text
    assert (ws / "keep.txt").read_text() == "precious\n"


async def test_write_refuses_a_file_changed_since_read(run: RunContext, ws: Path) -> None:
    (ws / "shared.txt").write_text("v1\n")
    await call(run, read_file, path="shared.txt")
    (ws / "shared.txt").write_text("v2 by someone else\n")
    result = await call(run, write_file, path="shared.txt", content="mine\n")
    assert result.is_error and "changed since you read it" in result.text
    assert (ws / "shared.txt").read_text() == "v2 by someone else\n"


async def test_write_after_read_keeps_the_mode(run: RunContext, ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o751)
    await call(run, read_file, path="run.sh")
    result = await call(run, write_file, file_path="run.sh", content="echo new\n")
    assert result.text == "Replaced run.sh: 1 lines, 9 bytes"
    assert script.read_text() == "echo new\n" and stat.S_IMODE(script.stat().st_mode) == 0o751


# ---- edit_file --------------------------------------------------------------------------------


async def read_then_edit(run: RunContext, path: str, **arguments):  # type: ignore[no-untyped-def]
    await call(run, read_file, path=path)
    return await call(run, edit_file, path=path, **arguments)


async def test_edit_replaces_once_and_answers_with_a_diff(run: RunContext, ws: Path) -> None:
    (ws / "code.py").write_text("a = 1\nb = 2\nc = 3\n")
    result = await read_then_edit(run, "code.py", old_string="b = 2", new_string="b = 20")
    assert (ws / "code.py").read_text() == "a = 1\nb = 20\nc = 3\n"
    assert result.text.startswith("Edited code.py (1 replacement):\n--- code.py\n+++ code.py\n")
    assert "\n-b = 2\n+b = 20\n" in result.text
    # The hash was updated: a second edit needs no new read.
    again = await call(run, edit_file, path="code.py", old_string="c = 3", new_string="c = 30")
    assert not again.is_error and (ws / "code.py").read_text().endswith("c = 30\n")


async def test_edit_refuses_an_ambiguous_or_missing_string(run: RunContext, ws: Path) -> None:
    (ws / "dup.txt").write_text("x\ny\nx\nx\n")
    many = await read_then_edit(run, "dup.txt", old_string="x", new_string="z")
    assert many.is_error and "appears 3 times in dup.txt (at lines 1, 3, 4)" in many.text
    none = await call(run, edit_file, path="dup.txt", old_string="w", new_string="z")
    assert none.is_error and "old_string not found in dup.txt" in none.text
    assert (ws / "dup.txt").read_text() == "x\ny\nx\nx\n"


async def test_edit_replace_all(run: RunContext, ws: Path) -> None:
    (ws / "dup.txt").write_text("x\ny\nx\nx\n")
    result = await read_then_edit(run, "dup.txt", old_string="x", new_string="z", replace_all=True)
    assert result.text.startswith("Edited dup.txt (3 replacements):")
    assert (ws / "dup.txt").read_text() == "z\ny\nz\nz\n"


async def test_edit_requires_a_read_and_no_change_since(run: RunContext, ws: Path) -> None:
    (ws / "e.txt").write_text("one\n")
    unread = await call(run, edit_file, path="e.txt", old_string="one", new_string="two")
    assert unread.is_error and "read it first" in unread.text
    await call(run, read_file, path="e.txt")
    (ws / "e.txt").write_text("one changed\n")
    stale = await call(run, edit_file, path="e.txt", old_string="one", new_string="two")
    assert stale.is_error and "changed since you read it" in stale.text


async def test_edit_crlf_file_with_lf_old_string_keeps_crlf(run: RunContext, ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"first\r\nsecond\r\nthird\r\n")
    result = await read_then_edit(run, "win.txt", old_string="first\nsecond", new_string="1st\n2nd")
    assert not result.is_error, result.text
    assert (ws / "win.txt").read_bytes() == b"1st\r\n2nd\r\nthird\r\n"
    assert "\r" not in result.text


async def test_edit_lf_file_with_crlf_old_string(run: RunContext, ws: Path) -> None:
    (ws / "unix.txt").write_bytes(b"first\nsecond\n")
    result = await read_then_edit(
        run, "unix.txt", old_string="first\r\nsecond", new_string="a\r\nb"
    )
    assert not result.is_error, result.text
    assert (ws / "unix.txt").read_bytes() == b"a\nb\n"


# ---- find_files -------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "src").mkdir()
    (ws / "src/app.py").write_text("import os\n\ndef main():\n    return Needle()\n")
    (ws / "src/util.py").write_text("needle = 1\nneedle_two = 2\n")
    (ws / "notes.md").write_text("a\nb\nneedle here\nc\nd\n")
    return ws


async def test_find_content(run: RunContext, tree: Path) -> None:
    result = await call(run, find_files, pattern="needle")
    lines = result.text.splitlines()
    assert lines[:3] == [
        "notes.md:3:needle here",
        "src/util.py:1:needle = 1",
        "src/util.py:2:needle_two = 2",
    ]
    assert lines[-1] == "(3 matching lines in 2 files; result lines 1-3 of 3)"


async def test_find_ignore_case_and_glob(run: RunContext, tree: Path) -> None:
    result = await call(run, find_files, pattern="needle", ignore_case=True, file_glob="*.py")
    assert "src/app.py:4:    return Needle()" in result.text
    assert "notes.md" not in result.text
    aliased = await call(run, find_files, pattern="needle", **{"-i": True, "glob": "app.py"})
    assert aliased.text.splitlines()[0] == "src/app.py:4:    return Needle()"


async def test_find_context_and_count_and_files_only(run: RunContext, tree: Path) -> None:
    around = await call(run, find_files, pattern="needle here", context=1)
    assert around.text.splitlines()[:3] == [
        "notes.md-2-b",
        "notes.md:3:needle here",
        "notes.md-4-c",
    ]
    count = await call(run, find_files, pattern="needle", output_mode="count")
    assert count.text.splitlines()[:2] == ["notes.md:1", "src/util.py:2"]
    assert "3 matching lines in 2 files" in count.text
    names = await call(run, find_files, pattern="needle", output_mode="files_only", path="src")
    assert names.text.splitlines()[0] == "src/util.py"


async def test_find_file_names(run: RunContext, tree: Path) -> None:
    result = await call(run, find_files, pattern="*.py", target="files")
    assert result.text.splitlines() == [
        "src/app.py",
        "src/util.py",
        "(2 files; result lines 1-2 of 2)",
    ]
    none = await call(run, find_files, pattern="*.rs", target="files")
    assert none.text == "No files for '*.rs' in .."


async def test_find_pages_results(run: RunContext, ws: Path) -> None:
    (ws / "many.txt").write_text("".join(f"hit {n}\n" for n in range(1, 8)))
    first = await call(run, find_files, pattern="hit", limit=3)
    assert first.text.splitlines()[:3] == [
        "many.txt:1:hit 1",
        "many.txt:2:hit 2",
        "many.txt:3:hit 3",
    ]
    assert "result lines 1-3 of 7; next page: call find_files with offset=3" in first.text
    last = await call(run, find_files, pattern="hit", limit=3, offset=6)
    assert last.text.splitlines() == [
        "many.txt:7:hit 7",
        "(7 matching lines in 1 files; result lines 7-7 of 7)",
    ]


async def test_find_reports_a_bad_regex_and_a_missing_path(run: RunContext, tree: Path) -> None:
    bad = await call(run, find_files, pattern="(unclosed")
    assert bad.is_error and "regex parse error" in bad.text
    missing = await call(run, find_files, pattern="x", path="nowhere")
    assert missing.is_error and "nowhere: no such file or folder" in missing.text


@pytest.fixture
def git_ws(ws: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git for .gitignore")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    return ws


async def test_find_skips_hidden_and_ignored_unless_inside(run: RunContext, git_ws: Path) -> None:
    ws = git_ws
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "build").mkdir()
    (ws / "build/out.txt").write_text("needle in build\n")
    (ws / "build/debug.log").write_text("needle in log\n")
    (ws / ".secret").mkdir()
    (ws / ".secret/key.txt").write_text("needle hidden\n")
    (ws / ".secret/.deeper").write_text("needle deeper\n")
    (ws / "top.txt").write_text("needle top\n")

    everywhere = await call(run, find_files, pattern="needle")
    assert everywhere.text.splitlines()[0] == "top.txt:1:needle top"
    assert "build" not in everywhere.text and ".secret" not in everywhere.text

    built = await call(run, find_files, pattern="needle", path="build")
    assert "build/debug.log:1:needle in log" in built.text  # *.log too: inside an ignored folder
    assert "build/out.txt:1:needle in build" in built.text
    hidden = await call(run, find_files, pattern="needle", path=".secret")
    assert ".secret/.deeper:1:needle deeper" in hidden.text
    assert ".secret/key.txt:1:needle hidden" in hidden.text


async def test_find_searches_documents_and_caches_their_text(
    run: RunContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "docs").mkdir()
    (ws / "docs/memo.docx").write_bytes(docx_bytes("intro", "the giraffe budget"))
    (ws / "docs/paper.pdf").write_bytes(pdf_bytes("zebra giraffe"))
    conversions: list[Path] = []
    real_convert = documents.convert_open_document

    def counting_convert(path: Path, f: BinaryIO) -> str:
        conversions.append(path)
        return real_convert(path, f)

    monkeypatch.setattr(documents, "convert_open_document", counting_convert)
    first = await call(run, find_files, pattern="giraffe")
    assert "docs/memo.docx:3:the giraffe budget" in first.text
    assert "docs/paper.pdf:1:zebra giraffe" in first.text
    assert len(conversions) == 2
    cached_md, _ = documents.cache_paths(run.home.documents_dir, ws / "docs/memo.docx")
    assert cached_md.read_text().splitlines()[2] == "the giraffe budget"

    again = await call(run, find_files, pattern="giraffe", output_mode="files_only")
    assert again.text.splitlines()[:2] == ["docs/memo.docx", "docs/paper.pdf"]
    assert len(conversions) == 2  # nothing reconverted
    await call(run, read_file, path="docs/memo.docx")
    assert len(conversions) == 2  # read_file shares the cache

    (ws / "docs/memo.docx").write_bytes(docx_bytes("intro", "now an okapi budget"))
    changed = await call(run, find_files, pattern="okapi", path="docs")
    assert "docs/memo.docx:3:now an okapi budget" in changed.text
    assert len(conversions) == 3


async def test_find_stops_after_the_timeout(
    run: RunContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = ws / "pipe"
    os.mkfifo(fifo)  # rg blocks reading a FIFO nobody writes to
    monkeypatch.setattr(search_files, "SEARCH_TIMEOUT_S", 0.5)
    result = await call(run, find_files, pattern="x", path="pipe")
    assert not result.is_error
    assert result.text.startswith("Search stopped after 0.5 s; the results are partial.")
    refused = await call(run, read_file, path="pipe")
    assert refused.is_error and "pipe is not a regular file" in refused.text


def test_tool_list_and_schema_sizes() -> None:
    assert [t.name for t in FILE_TOOLS] == ["read_file", "write_file", "edit_file", "find_files"]
    assert [t.read_only for t in FILE_TOOLS] == [True, False, False, True]
    for t in FILE_TOOLS:
        spec = t.spec()
        assert len(spec.description) + len(str(spec.parameters)) < 2400, t.name
