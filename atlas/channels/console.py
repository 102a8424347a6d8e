"""The terminal channel: `atlas chat` and the questions of `atlas tool`."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path
from typing import TextIO

from atlas.channels.base import Address
from atlas.providers.base import ToolCall


async def stdin_reader() -> asyncio.StreamReader:
    """stdin as an asyncio stream: no thread left blocked in input() at exit."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    if _watchable(sys.stdin):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:
        # A file or /dev/null cannot be watched by epoll: read it whole instead.
        data = await asyncio.to_thread(sys.stdin.buffer.read) if not sys.stdin.closed else b""
        reader.feed_data(data)
        reader.feed_eof()
    return reader


def _watchable(stream: TextIO) -> bool:
    """A terminal, a pipe or a socket; not a regular file or another device."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stream.isatty() or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def describe_call(call: ToolCall, width: int = 100) -> str:
    """One line for a tool call: its name and its arguments, shortened."""
    try:
        args = json.loads(call.arguments or "{}")
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    except (json.JSONDecodeError, AttributeError):
        shown = call.arguments
    line = f"{call.name}({shown})".replace("\n", "\\n")
    return line if len(line) <= width else line[: width - 1] + "…"


class ConsoleChannel:
    name = "console"
    streams = True

    def __init__(self, reader: asyncio.StreamReader | None, out: TextIO = sys.stdout) -> None:
        self.reader = reader
        self.out = out
        self._streamed = False

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def typing(self, address: Address) -> None:
        return None

    async def stream(self, address: Address, text: str) -> None:
        if not self._streamed:
            self.write(f"{address.bot}> ")
            self._streamed = True
        self.write(text)

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        if self._streamed:
            self.write("\n")
            self._streamed = False
        self.write(f"  → {describe_call(call)}\n")

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        if self._streamed:
            self.write("\n")  # the text itself was already streamed
            self._streamed = False
        else:
            self.write(f"{address.bot}> {text or '(no answer)'}\n")
        for path in files or []:
            self.write(f"  [file] {path}\n")

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Numbered choices on the terminal; end of input answers None (nobody to ask)."""
        if self.reader is None:
            return None
        self.write(f"\n? {question}\n")
        for number, choice in enumerate(choices, 1):
            self.write(f"  {number}. {choice}\n")
        while True:
            self.write("choose a number: ")
            line = (await self.reader.readline()).decode(errors="replace")
            if not line:
                return None
            answer = line.strip()
            if answer.isdigit() and 1 <= int(answer) <= len(choices):
                return choices[int(answer) - 1]
            if answer in choices:
                return answer
