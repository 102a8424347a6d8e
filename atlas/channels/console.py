"""The terminal channel: `atlas chat` and the questions of `atlas tool`."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path
from typing import TextIO

from atlas.channels.base import OTHER, Address, Answer, Question, QuestionOutcome
from atlas.channels.console_input import ConsoleInput
from atlas.providers.base import ToolCall
from atlas.turn_failure import TURN_FAILED


async def stdin_reader() -> asyncio.StreamReader:
    """stdin as an asyncio stream: no thread left blocked in input() at exit."""
    loop = asyncio.get_running_loop()
    # A pasted line up to 1 MiB is one line (the default limit, 64 KiB, would drop it).
    reader = asyncio.StreamReader(limit=1 << 20)
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
    shows_errors = True  # the operator's own terminal: a failed turn's detail (turn_failure.py)

    def __init__(
        self, reader: ConsoleInput | asyncio.StreamReader | None, out: TextIO = sys.stdout
    ) -> None:
        # Every question reads through the chat's one ConsoleInput (console_input.py).
        self.reader = ConsoleInput(reader) if isinstance(reader, asyncio.StreamReader) else reader
        self.out = out
        self._streamed = False
        self._streamed_text = ""  # what the reply streaming now has shown
        self._off_prompt = False  # a line was started below a waiting idle prompt
        self.failed_turns = 0  # replies that said a turn failed (`atlas chat`'s exit code)

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
            self._leave_prompt()
            self.write(f"{address.bot}> ")
            self._streamed = True
            self._streamed_text = ""
        self._streamed_text += text
        self.write(text)

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        self._leave_prompt()
        if self._streamed:
            self.write("\n")
            self._streamed = False
        self.write(f"  → {describe_call(call)}\n")

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        if text.startswith(TURN_FAILED):
            self.failed_turns += 1
        if self._streamed:
            self.write("\n")
            self._streamed = False
            if _same_start(text, self._streamed_text):  # the text itself was already streamed
                self._list_files(files)
                self._prompt_again()
                return
        else:
            self._leave_prompt()
        # Not the streamed reply: a message of its own ("Stopped." after a stopped stream,
        # a failed turn's message, a notice).
        self.write(f"{address.bot}> {text or '(no answer)'}\n")
        self._list_files(files)
        self._prompt_again()

    def _list_files(self, files: list[Path] | None) -> None:
        for path in files or []:
            self.write(f"  [file] {path}\n")

    def _leave_prompt(self) -> None:
        """A reply between turns (an executor's result, a routine's) starts below the idle
        prompt's `you> ` instead of after it; `_prompt_again` shows the prompt after it."""
        if self.reader is not None and self.reader.prompt_waiting and not self._off_prompt:
            self.write("\n")
            self._off_prompt = True

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Numbered choices on the terminal; end of input answers None (nobody to ask)."""
        if self.reader is None:
            return None
        self._end_streamed_line()
        self._off_prompt = True  # the question starts on a line of its own
        self.write(f"\n? {question}\n")
        for number, choice in enumerate(choices, 1):
            self.write(f"  {number}. {choice}\n")
        try:
            while True:
                self.write("choose a number: ")
                line = await self.reader.answer_line()
                if line is None:
                    return None
                answer = line.strip()
                if answer.isdigit() and 1 <= int(answer) <= len(choices):
                    return choices[int(answer) - 1]
                if answer in choices:
                    return answer
        finally:
            self._prompt_again()

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        """Each question with numbered choices, `o` for Other (a line of free text), `c` to
        cancel; end of input cancels. Undelivered when there is no input at all."""
        if self.reader is None:
            return QuestionOutcome("undelivered", detail="the terminal has no input")
        self._end_streamed_line()
        self._off_prompt = True  # each question starts on a line of its own
        answers: list[Answer] = []
        try:
            for number, question in enumerate(questions, 1):
                counter = f" ({number}/{len(questions)})" if len(questions) > 1 else ""
                self.write(f"\n?{counter} {question.text}\n")
                for index, choice in enumerate(question.choices, 1):
                    recommended = " (recommended)" if index == 1 else ""
                    self.write(f"  {index}. {choice}{recommended}\n")
                answer = await self._console_answer(question)
                if answer is None:
                    return QuestionOutcome("cancelled", detail="the user typed c or input ended")
                answers.append(answer)
        finally:
            self._prompt_again()
        return QuestionOutcome("submitted", tuple(answers))

    def _end_streamed_line(self) -> None:
        if self._streamed:
            self.write("\n")
            self._streamed = False

    def _prompt_again(self) -> None:
        """A question that came while the idle prompt waited (an executor's, between turns)
        took its place on the screen: show the prompt again."""
        self._off_prompt = False
        if self.reader is not None and self.reader.prompt_waiting:
            self.write("you> ")

    async def _console_answer(self, question: Question) -> Answer | None:
        """One question's answer from the terminal; None to cancel."""
        if not question.choices:
            text = await self._read_line("your answer (c to cancel): ")
            return None if text is None or text.lower() == "c" else Answer(other=text)
        self.write(f"  o. {OTHER} (type your own answer)\n")
        prompt = (
            "choose numbers (e.g. 1,3), o for other, c to cancel: "
            if question.multi_select
            else "choose a number, o for other, c to cancel: "
        )
        while True:
            line = await self._read_line(prompt)
            if line is None or line.lower() == "c":
                return None
            picked = _picked_numbers(line, len(question.choices), question.multi_select)
            if picked is None:
                continue
            numbers, other = picked
            chosen = tuple(question.choices[n - 1] for n in numbers)
            if not other:
                return Answer(chosen)
            text = await self._read_line("your answer: ")
            return None if text is None else Answer(chosen, other=text)

    async def _read_line(self, prompt: str) -> str | None:
        """A non-empty line (asked again while empty); None at the end of input."""
        assert self.reader is not None
        while True:
            self.write(prompt)
            raw = await self.reader.answer_line()
            if raw is None:
                return None
            line = raw.strip()
            if line:
                return line


def _same_start(text: str, streamed: str) -> bool:
    """Whether `text` is the reply that was streamed (compared by its start: the whole text
    may be tidied after streaming)."""
    shown = streamed.strip()
    return bool(shown) and text.strip().startswith(shown[:40])


def _picked_numbers(line: str, count: int, multi: bool) -> tuple[list[int], bool] | None:
    """`2` or `1,3,o` → (choice numbers, whether Other was picked); None when not valid."""
    numbers: list[int] = []
    other = False
    for part in line.replace(",", " ").split():
        if part.lower() == "o":
            other = True
        elif part.isdigit() and 1 <= int(part) <= count:
            if int(part) not in numbers:
                numbers.append(int(part))
        else:
            return None
    if not multi and len(numbers) + other != 1:
        return None
    return numbers, other
