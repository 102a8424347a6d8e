"""What the conversation read from outside the workspace must not leave in an address: a
web_fetch URL, a web_search query or browser code that carries it is asked, every time.

When a file tool or a command returns content from outside the bot's workspace, its distinctive
pieces are remembered on the conversation's state: 8-character windows (every 4th position,
lower-cased) of each token that looks like a key, a password or an identifier (letters and digits
of at least two kinds). A later address is checked window by window, as written, percent-decoded,
and with its base64 and hex pieces decoded: one set lookup per character, so cheap.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlas.tools.registry import RunContext
from atlas.trust.gate import Ask

STATE_KEY = "outside-read-fingerprints"
WINDOW = 8
STRIDE = 4
MAX_SCANNED_CHARS = 1_000_000  # of one result; beyond that its content is not fingerprinted
INLINE_CHARS = 100_000  # texts up to this are fingerprinted on the event loop (read_file's page)
MAX_WINDOWS = 400_000  # per conversation (about 30 MB at most); later reads are not remembered
TOKEN = re.compile(r"[A-Za-z0-9]{8,}")
BASE64_PIECE = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
HEX_PIECE = re.compile(r"(?:[0-9a-fA-F]{2}){8,}")
# What each tool sends out in its arguments.
CARRYING_ARGUMENTS = {"web_fetch": ("url",), "web_search": ("query",), "browser_exec": ("code",)}


@dataclass
class Fingerprints:
    """The windows of what was read from outside the workspace, and where each came from."""

    windows: dict[str, str] = field(default_factory=dict)  # window → the path or command

    def add(self, text: str, source: str) -> None:
        for match in TOKEN.finditer(text[:MAX_SCANNED_CHARS]):
            token = match.group(0)
            if not _distinctive(token):
                continue
            last = len(token) - WINDOW
            for start in [*range(0, last + 1, STRIDE), last]:
                window = token[start : start + WINDOW]
                if len(self.windows) >= MAX_WINDOWS:
                    return
                if _kinds(window) >= 2:
                    self.windows.setdefault(window.lower(), source)

    def found_in(self, text: str) -> str | None:
        """The source of a remembered window that `text` carries, or None."""
        if not self.windows:
            return None
        for candidate in _readings(text):
            for match in TOKEN.finditer(candidate.lower()):
                run = match.group(0)
                for start in range(len(run) - WINDOW + 1):
                    source = self.windows.get(run[start : start + WINDOW])
                    if source is not None:
                        return source
        return None


def _kinds(text: str) -> int:
    """How many of lower case, capitals and digits an ASCII letters-and-digits run has (string
    methods, not a loop in Python: this runs for every window of a megabyte)."""
    return (text != text.upper()) + (text != text.lower()) + (not text.isalpha())


def _distinctive(token: str) -> bool:
    """Letters, capitals and digits together (`Tr0ub4dor`, a key's base64), or two kinds in a
    long run (`AKIAIOSFODNN7EXAMPLE`, a hex digest): not a word (`b64encode`, `settings`)."""
    kinds = _kinds(token)
    return kinds == 3 or (kinds == 2 and len(token) >= 16)


def _readings(text: str) -> list[str]:
    """The text as sent, percent-decoded, and its base64 and hex pieces decoded."""
    text = text[:100_000]
    readings = [text]
    if "%" in text or "+" in text:
        readings.append(urllib.parse.unquote_plus(text))
    plain = readings[-1]
    for piece in BASE64_PIECE.findall(plain)[:200]:
        readings.append(_unbase64(piece))
    for piece in HEX_PIECE.findall(plain)[:200]:
        try:
            readings.append(bytes.fromhex(piece).decode("utf-8", "replace"))
        except ValueError:
            continue  # an odd-length run: not hex the reader would decode
    return [r for r in readings if r]


def _unbase64(piece: str) -> str:
    padded = piece.rstrip("=") + "=" * (-len(piece.rstrip("=")) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return ""
    return raw.decode("utf-8", "replace")


def _fingerprints(run: RunContext) -> Fingerprints:
    found = run.state.tool_state.get(STATE_KEY)
    if not isinstance(found, Fingerprints):
        found = run.state.tool_state[STATE_KEY] = Fingerprints()
    return found


def _outside_workspace(run: RunContext, path: Path) -> bool:
    workspace = run.bot.workspace.resolve()
    return path != workspace and workspace not in path.parents


# ---------------------------------------------------------------- recording


async def remember_read(run: RunContext, path: Path, text: str) -> None:
    """A file tool returned `text` from `path` (resolved): remembered when it lies outside the
    workspace."""
    if text and _outside_workspace(run, path):
        await _add(_fingerprints(run), text, str(path))


async def remember_command_output(run: RunContext, command: str, cwd: Path, output: str) -> None:
    """A command's output: remembered when the command reads outside the workspace (a path,
    the environment), as the gate reads it."""
    if not output or not command:
        return
    source = await asyncio.to_thread(command_reads_outside, run, command, cwd)
    if source is not None:
        await _add(_fingerprints(run), output, source)


async def _add(prints: Fingerprints, text: str, source: str) -> None:
    """A page of a file is taken at once (~20 ms for 100,000 characters); more, off the loop."""
    if len(text) <= INLINE_CHARS:
        prints.add(text, source)
    else:
        await asyncio.to_thread(prints.add, text, source)


def command_reads_outside(run: RunContext, command: str, cwd: Path) -> str | None:
    from atlas.trust.command_words import Context, clean
    from atlas.trust.parser.normalise import analyse
    from atlas.trust.taint import ENV_COMMAND, reads_outside

    context = Context(
        user_home=clean(str(Path.home())),
        atlas_home=clean(str(run.home.root)),
        cwd=cwd,
        deny=(),
        workspace=clean(str(run.bot.workspace.resolve())),
    )
    if ENV_COMMAND.search(command):
        return "the environment"
    for part in analyse(command).parts[:500]:
        if part.words and (source := reads_outside(part, context)):
            return source
    return None


# ---------------------------------------------------------------- asking


def carried_question(tool: str, args: dict[str, Any], run: RunContext) -> Ask | None:
    """web_fetch, web_search or browser code carrying something read from outside the
    workspace: asked every time ("outside:" is never remembered)."""
    names = CARRYING_ARGUMENTS.get(tool)
    found = run.state.tool_state.get(STATE_KEY)
    if names is None or not isinstance(found, Fingerprints):
        return None
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and (source := found.found_in(value)):
            shown = value if len(value) <= 300 else value[:300] + "…"
            return Ask(
                f"{tool} would send data read from {source} (outside this bot's workspace) "
                f"in its {name}: {shown}. Allow?",
                "outside:read-data",
            )
    return None
