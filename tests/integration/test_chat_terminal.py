"""`atlas chat` on a real terminal (a pty), with a fake model server on loopback: one reader
of the terminal, so `/stop` stops a reply while it streams, and a question that comes while
the idle prompt waits (an executor's, between turns) gets the typed answer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
from pathlib import Path

from aiohttp import web

from tests.fakes.model_servers import FakeOpenAIServer
from tests.helpers import make_home


class PtyChat:
    """`atlas chat` as a child process whose stdin and stdout are a pseudo-terminal."""

    def __init__(self, process: asyncio.subprocess.Process, master: int) -> None:
        self.process, self.master = process, master
        self.output = ""
        self._more = asyncio.Event()
        asyncio.get_running_loop().add_reader(master, self._read)

    @classmethod
    async def start(
        cls, home_root: Path, *extra: str, env: dict[str, str] | None = None
    ) -> PtyChat:
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR  # "\n" stays "\n" in what we read
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "atlas.cli",
            "chat",
            *extra,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, "ATLAS_HOME": str(home_root), **(env or {})},
            start_new_session=True,
        )
        os.close(slave)
        return cls(process, master)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
        self.output += data.decode(errors="replace")
        self._more.set()

    async def wait_for(self, marker: str, *, after: int = 0, timeout: float = 15.0) -> int:
        """Wait until `marker` shows after position `after`; its position."""

        async def until_shown() -> int:
            while (found := self.output.find(marker, after)) < 0:
                if self.process.returncode is not None:
                    raise AssertionError(f"chat ended before {marker!r}:\n{self.output}")
                self._more.clear()
                await self._more.wait()
            return found

        try:
            return await asyncio.wait_for(until_shown(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {marker!r} within {timeout}s:\n{self.output}") from None

    def type(self, line: str) -> None:
        os.write(self.master, f"{line}\n".encode())

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


class StallingServer(FakeOpenAIServer):
    """Streams the first pieces of its first reply, then stalls (until the client leaves or
    the test ends): a reply caught mid-stream."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = False

    async def _stream(
        self, request: web.Request, frames: list[str], pace: float = 0.0
    ) -> web.StreamResponse:
        if self.stalled:
            return await super()._stream(request, frames, pace)
        self.stalled = True
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in frames[:2]:  # the role, then the first piece of text
            await response.write(frame.encode())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), 60)
        return response


async def test_stop_typed_while_a_reply_streams_stops_it(home_path: Path) -> None:
    async with StallingServer() as server:
        make_home(home_path, base_url=server.base_url)
        server.reply(text="The first part of a long answer that never ends " * 3)
        server.reply(text="second answer")
        chat = await PtyChat.start(home_path)
        try:
            await chat.wait_for("you> ")
            chat.type("tell me everything")
            shown = await chat.wait_for("The first part")
            chat.type("/stop")
            stopped = await chat.wait_for("Stopped.", after=shown, timeout=8)
            await chat.wait_for("you> ", after=stopped)
            chat.type("again")
            await chat.wait_for("second answer", after=stopped)
            chat.type("/exit")
            assert await asyncio.wait_for(chat.process.wait(), 10) == 0
        finally:
            await chat.close()
    server.assert_complete()
    users = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert users == ["tell me everything", "again"]  # /stop never went to the model


FAKES = Path(__file__).resolve().parents[1] / "fakes"


async def test_an_executors_question_between_turns_gets_the_typed_answer(tmp_path: Path) -> None:
    project, account = tmp_path / "project", tmp_path / "claude-main"
    project.mkdir()
    account.mkdir()
    (account / "fake-scenario").write_text("question")
    async with FakeOpenAIServer() as server:
        config = f"""\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "{server.base_url}"
max_retries = 0

[review]
enabled = false

[executors.claude-code]
enabled = true
binary = "{FAKES / "fake_claude.py"}"
accounts = {{ main = "{account}" }}
"""
        home_root = tmp_path / "home"
        make_home(home_root, config=config)
        task = {"goal": "set up a db", "folder": str(project)}
        server.reply(calls=[("delegate", {"executor": "claude-code", "tasks": [task]})])
        server.reply(text="Started it.")
        server.reply(text="It chose postgres.")  # the task's result, as a notice
        chat = await PtyChat.start(home_root)
        try:
            await chat.wait_for("you> ")
            chat.type("set up a database")
            started = await chat.wait_for("Started it.")
            asked = await chat.wait_for("Which database?", after=started, timeout=30)
            await chat.wait_for("choose a number", after=asked)
            chat.type("2")
            await chat.wait_for("It chose postgres.", after=asked, timeout=30)
            chat.type("/exit")
            assert await asyncio.wait_for(chat.process.wait(), 10) == 0
        finally:
            await chat.close()
    assert "readuntil" not in chat.output and "Traceback" not in chat.output, chat.output
    server.assert_complete()
    users = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert users[0] == "set up a database"
    assert "2" not in users  # the answer went to the question, not to the model
    assert "Set up postgres." in str(server.requests[-1]["messages"])
