"""Documents (PDF, Word, PowerPoint, Excel, EPUB, OpenDocument, RTF) as Markdown: converted once
(markitdown; odfdo and striprtf in atlas.tools.office_text), kept in the home's `documents/`
folder, converted again only when the file's size or mtime changes.

read_file pages this Markdown and find_files searches it, so a line number from one is a line
number in the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from atlas.errors import ToolError
from atlas.tools.office_text import (
    OPENDOCUMENT_SUFFIXES,
    RTF_SUFFIXES,
    opendocument_markdown,
    rtf_text,
)

if TYPE_CHECKING:
    from markitdown import MarkItDown

# What the installed markitdown extras ([pdf,docx,pptx,xlsx]) really convert (.epub needs no
# extra), then what office_text converts.
MARKITDOWN_SUFFIXES = (".pdf", ".docx", ".pptx", ".xlsx", ".epub")
DOCUMENT_SUFFIXES = (*MARKITDOWN_SUFFIXES, *OPENDOCUMENT_SUFFIXES, *RTF_SUFFIXES)
# Old binary Office formats nothing here reads (markitdown has no xlrd, no converter for .doc).
UNCONVERTIBLE_SUFFIXES = (".doc", ".xls", ".ppt")
MAX_DOCUMENT_BYTES = 50 * 1024 * 1024

_markitdown: MarkItDown | None = None
_markitdown_lock = threading.Lock()


def is_document(path: Path) -> bool:
    """True when the file is a document that is converted to Markdown."""
    return path.suffix.lower() in DOCUMENT_SUFFIXES


def unconvertible_reason(path: Path) -> str | None:
    """Why a document of this kind cannot be read here, or None when it is not such a document."""
    suffix = path.suffix.lower()
    if suffix not in UNCONVERTIBLE_SUFFIXES:
        return None
    return (
        f"{path}: {suffix} files cannot be converted here (documents read: "
        f"{' '.join(DOCUMENT_SUFFIXES)}); convert it first, e.g. "
        "`libreoffice --headless --convert-to pdf FILE`"
    )


def cache_paths(documents_dir: Path, path: Path) -> tuple[Path, Path]:
    """The cached Markdown and its metadata file for a document (keyed by its resolved path)."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return documents_dir / f"{key}.md", documents_dir / f"{key}.json"


# Opens a resolved path once, checked (atlas.tools.fences.Fence.open_file): the file and its stat.
FileOpener = Callable[[Path], tuple[BinaryIO, os.stat_result]]


async def cached_markdown_file(documents_dir: Path, path: Path, open_file: FileOpener) -> Path:
    """The cache file holding a document's Markdown, converting the document first if needed."""

    def refresh() -> Path:
        f, st = open_file(path)
        with f:
            return markdown_file_for(documents_dir, path, f, st)

    return await asyncio.to_thread(refresh)


def markdown_file_for(documents_dir: Path, path: Path, f: BinaryIO, st: os.stat_result) -> Path:
    """The cached Markdown of the document open as `f` (opened once, from resolved `path`):
    the file converted is the file that was checked, never a second lookup of its path."""
    markdown_file, meta_file = cache_paths(documents_dir, path)
    stamp = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if markdown_file.exists() and _read_meta(meta_file) == stamp:
        return markdown_file
    if st.st_size > MAX_DOCUMENT_BYTES:
        raise ToolError(
            f"{path}: document of {st.st_size} bytes is over the {MAX_DOCUMENT_BYTES // 2**20} MB "
            "conversion limit"
        )
    text = convert_open_document(path, f)
    documents_dir.mkdir(parents=True, exist_ok=True)
    # Markdown before metadata: a crash in between leaves stale metadata, so it converts again.
    _write_atomically(markdown_file, text)
    _write_atomically(meta_file, json.dumps(stamp))
    return markdown_file


def _read_meta(meta_file: Path) -> dict[str, object] | None:
    try:
        return json.loads(meta_file.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _converter() -> MarkItDown:
    global _markitdown
    with _markitdown_lock:
        if _markitdown is None:
            from markitdown import MarkItDown  # heavy (~2 s): only when a document is read

            # exiftool_path "" (not None): markitdown would otherwise look for exiftool in
            # $EXIFTOOL_PATH and the usual folders and run it, on the host, over any document
            # its content sniffer takes for an image or a sound (a .pdf that is a JPEG).
            # Plugins off: nothing installed beside Atlas joins in. Conversion then runs no
            # program (docs/sandbox.md, Helpers Atlas runs for a bot).
            _markitdown = MarkItDown(enable_plugins=False, exiftool_path="")
            from PIL import EpsImagePlugin  # markitdown's pptx reader loads Pillow anyway

            # Pillow runs Ghostscript to load an EPS image (one inside a slide deck, say).
            EpsImagePlugin.gs_binary = False
        return _markitdown


def convert_open_document(path: Path, f: BinaryIO) -> str:
    """Convert the open document `f` (named `path`, for its kind and for messages)."""
    suffix = path.suffix.lower()
    try:
        if suffix in OPENDOCUMENT_SUFFIXES:
            return opendocument_markdown(path, f.read())
        if suffix in RTF_SUFFIXES:
            return rtf_text(f.read())
        from markitdown import StreamInfo

        info = StreamInfo(extension=suffix, filename=path.name)
        return _converter().convert_stream(f, stream_info=info).markdown
    except ToolError:
        raise
    except (
        Exception
    ) as exc:  # markitdown raises many kinds; the model needs the reason, not a crash
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolError(f"{path}: could not convert the document to text ({reason})") from exc


def convert_document(path: Path) -> str:
    """Convert a document file Atlas made itself (web_fetch's download)."""
    if path.suffix.lower() not in MARKITDOWN_SUFFIXES:
        with path.open("rb") as f:
            return convert_open_document(path, f)
    converter = _converter()
    try:
        return converter.convert_local(str(path)).markdown
    except (
        Exception
    ) as exc:  # markitdown raises many kinds; the model needs the reason, not a crash
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolError(f"{path}: could not convert the document to text ({reason})") from exc


def _write_atomically(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
