"""What every channel adapter offers the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from atlas.providers.base import ToolCall


@dataclass(frozen=True)
class Address:
    """Where a conversation lives on its platform: the key of a conversation."""

    bot: str
    channel: str
    chat: str
    thread: str = ""
    user: str = ""


OTHER = "Other"  # the free-text choice every channel adds to a question's own choices


@dataclass(frozen=True)
class Question:
    """One question of `ask_user`: up to four choices (the recommended first), and "Other"."""

    text: str
    choices: tuple[str, ...] = ()
    multi_select: bool = False


@dataclass(frozen=True)
class Answer:
    """What one person answered to one question: the choices picked, and any free text."""

    chosen: tuple[str, ...] = ()
    other: str = ""
    by: str = ""  # who answered, as the platform names them


QuestionStatus = Literal["submitted", "cancelled", "timed out", "undelivered"]


@dataclass(frozen=True)
class QuestionOutcome:
    """How a wait for answers ended; `answers` (one per question) only when submitted."""

    status: QuestionStatus
    answers: tuple[Answer, ...] = ()
    detail: str = ""  # why it was undelivered or cancelled, for the model


class Channel(Protocol):
    name: str
    streams: bool  # shows text as it is written (the terminal does; chat platforms edit later)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    # Called only by the outbox (atlas/outbox/sender.py), once per row: the platform's message
    # id (None where there is none), or one of atlas/outbox/errors.py's errors: RetryLater,
    # NeverRetry, MaybeDelivered. A channel keeps nothing: the outbox keeps and resends.
    async def send(
        self, address: Address, text: str, files: list[Path] | None = None
    ) -> str | None: ...

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None: ...

    async def ask_questions(
        self, address: Address, questions: list[Question]
    ) -> QuestionOutcome: ...

    async def typing(self, address: Address) -> None: ...

    async def stream(self, address: Address, text: str) -> None: ...

    async def show_tool_call(self, address: Address, call: ToolCall) -> None: ...
