"""`atlas chat` end to end: the real command, the real openai SDK, a fake server on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.fakes.model_servers import FakeOpenAIServer
from tests.helpers import make_home


async def start_chat(home_root: Path, *extra: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "ATLAS_HOME": str(home_root), "PYTHONUNBUFFERED": "1"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "atlas.cli",
        "chat",
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )


async def read_until(
    process: asyncio.subprocess.Process, marker: str, seen: list[str], timeout: float = 15.0
) -> str:
    """Read output until `marker` appears; everything read is kept in `seen`."""
    assert process.stdout is not None

    async def read() -> str:
        while marker not in "".join(seen):
            chunk = await process.stdout.read(4096)
            if not chunk:
                raise AssertionError(f"chat ended before {marker!r}; output:\n{''.join(seen)}")
            seen.append(chunk.decode())
        return "".join(seen)

    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise AssertionError(f"no {marker!r} within {timeout}s; output:\n{''.join(seen)}") from None


async def say(process: asyncio.subprocess.Process, line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(f"{line}\n".encode())
    await process.stdin.drain()


async def test_chat_uses_all_five_tools_and_answers(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        home = make_home(home_path, base_url=server.base_url)
        workspace = home.bot(None).workspace
        server.reply(calls=[("write_file", {"path": "notes.txt", "content": "alpha\nbeta\n"})])
        server.reply(
            calls=[("read_file", {"path": "notes.txt"}), ("find_files", {"pattern": "beta"})]
        )
        server.reply(
            calls=[
                ("edit_file", {"path": "notes.txt", "old_string": "beta", "new_string": "gamma"})
            ]
        )
        server.reply(calls=[("run_command", {"command": "cat notes.txt"})])
        server.reply(text="All done: notes.txt now says alpha and gamma.")

        chat = await start_chat(home_path)
        seen: list[str] = []
        await read_until(chat, "you> ", seen)
        await say(chat, "make me a note, then change it")
        output = await read_until(chat, "alpha and gamma.", seen)
        await say(chat, "/exit")
        assert await asyncio.wait_for(chat.wait(), 10) == 0

    server.assert_complete()
    for name in ("write_file", "read_file", "find_files", "edit_file", "run_command"):
        assert f"→ {name}(" in output  # one line per tool call
    assert (workspace / "notes.txt").read_text() == "alpha\ngamma\n"
    assert all(body.get("stream") for body in server.requests)  # streaming is the default
    results = {
        m.get("tool_call_id"): m["content"]
        for m in server.requests[-1]["messages"]
        if m["role"] == "tool"
    }
    assert len(results) == 5
    texts = list(results.values())
    assert "1\talpha" in texts[1]  # read_file's numbered lines
    assert "notes.txt" in texts[2]  # find_files found the file
    assert "+gamma" in texts[3]  # edit_file's diff
    assert "alpha\ngamma" in texts[4] and "[exit code 0]" in texts[4]
    tool_names = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert tool_names[:5] == ["read_file", "write_file", "edit_file", "find_files", "run_command"]


async def test_ctrl_c_stops_the_turn_but_not_the_chat(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        make_home(home_path, base_url=server.base_url)
        server.reply(text="too slow", delay=30)
        server.reply(text="second answer")
        chat = await start_chat(home_path, "--no-stream")
        seen: list[str] = []
        await read_until(chat, "you> ", seen)
        await say(chat, "take your time")
        for _ in range(200):
            if server.requests:
                break
            await asyncio.sleep(0.05)
        chat.send_signal(signal.SIGINT)
        await read_until(chat, "Stopped.", seen)
        await say(chat, "again")
        output = await read_until(chat, "second answer", seen)
        chat.stdin.close()  # Ctrl-D leaves
        assert await asyncio.wait_for(chat.wait(), 10) == 0
    assert "too slow" not in output
    assert len(server.requests) == 2
    users = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert users == ["take your time", "again"]  # the stopped message is kept in the history
