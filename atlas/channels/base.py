"""What every channel adapter offers the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from atlas.providers.base import ToolCall


@dataclass(frozen=True)
class Address:
    """Where a conversation lives on its platform: the key of a conversation."""

    bot: str
    channel: str
    chat: str
    thread: str = ""
    user: str = ""


class Channel(Protocol):
    name: str
    streams: bool  # shows text as it is written (the terminal does; chat platforms edit later)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None: ...

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None: ...

    async def typing(self, address: Address) -> None: ...

    async def stream(self, address: Address, text: str) -> None: ...

    async def show_tool_call(self, address: Address, call: ToolCall) -> None: ...
