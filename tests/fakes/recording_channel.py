"""A channel that keeps what it is asked to send: the far end of deliveries in tests."""

from __future__ import annotations

from pathlib import Path

from atlas.channels.base import Address
from atlas.providers.base import ToolCall


class RecordingChannel:
    """Implements the Channel protocol; `sent` holds (address, text) in order."""

    streams = False

    def __init__(self, name: str = "fake", *, fail_with: str | None = None) -> None:
        self.name = name
        self.fail_with = fail_with  # make send raise OSError(fail_with): a platform outage
        self.sent: list[tuple[Address, str]] = []

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def typing(self, address: Address) -> None: ...
    async def stream(self, address: Address, text: str) -> None: ...
    async def show_tool_call(self, address: Address, call: ToolCall) -> None: ...

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        if self.fail_with:
            raise OSError(self.fail_with)
        self.sent.append((address, text))

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        return None
