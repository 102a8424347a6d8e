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


@dataclass(frozen=True)
class AnsweredElsewhere:
    """Why a channel's open question is withdrawn: another place (the dashboard) answered it
    first. It rides on the cancel of the channel's wait (`task.cancel(AnsweredElsewhere(…))`,
    see atlas/pending_asks.py), so the channel edits its message to show the answer instead
    of "no answer in time"."""

    answers: tuple[str, ...]  # each question's answer in one line (one for an approval)
    where: str = "on the dashboard"

    def note(self, index: int = 0) -> str:
        answer = self.answers[index] if index < len(self.answers) else "answered"
        return f"{answer} ({self.where})"


def answered_elsewhere(cancel: BaseException) -> AnsweredElsewhere | None:
    """The AnsweredElsewhere a CancelledError carries, or None (a timeout, /stop)."""
    reason = cancel.args[0] if cancel.args else None
    return reason if isinstance(reason, AnsweredElsewhere) else None
