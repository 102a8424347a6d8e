"""The link between the home's process and a worker (atlas/workers/link.py), over a real Unix
socket pair: requests and answers, refusals that keep their words, a result that cannot cross
answered with an error instead of a hang, the peer's end failing what waits on it, and the
worker's end never inherited by a command."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator

import pytest

from atlas.errors import AtlasError
from atlas.workers.link import Link, LinkClosed, RemoteError, adopt_fd, socket_pair


async def pong() -> str:
    return "pong"


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Link, Link]]:
    home_end, worker_end = socket_pair()
    home, worker = Link("worker 1"), Link("the home's process")
    await home.open(home_end)
    await worker.open(worker_end)
    yield home, worker
    await home.close()
    await worker.close()


async def test_an_ask_is_answered_both_ways_and_a_tell_arrives(pair: tuple[Link, Link]) -> None:
    home, worker = pair
    told: asyncio.Queue[str] = asyncio.Queue()

    async def double(n: int) -> int:
        return 2 * n

    async def note(text: str) -> None:
        await told.put(text)

    home.on("double", double)
    worker.on("double", double)
    worker.on("note", note)
    assert await worker.ask("double", 21) == 42
    answers = await asyncio.gather(*(home.ask("double", n) for n in range(20)))
    assert answers == [2 * n for n in range(20)]  # concurrent asks, each its own answer
    await home.tell("note", "hello")
    assert await asyncio.wait_for(told.get(), 5) == "hello"


async def test_a_refusal_comes_back_with_its_words(pair: tuple[Link, Link]) -> None:
    home, worker = pair

    async def refuse(name: str) -> None:
        raise AtlasError(f"bot scout has no routine {name!r}")

    async def broken() -> None:
        raise ValueError("a bug")

    home.on("refuse", refuse)
    home.on("broken", broken)
    with pytest.raises(RemoteError) as refused:
        await worker.ask("refuse", "standup")
    assert str(refused.value) == "bot scout has no routine 'standup'"
    with pytest.raises(RemoteError, match="^ValueError: a bug$"):
        await worker.ask("broken")
    with pytest.raises(RemoteError, match="no handler for 'nothing'"):
        await worker.ask("nothing")
    home.on("ping", pong)
    assert await worker.ask("ping") == "pong"  # the link lives on after refusals


async def test_a_result_that_cannot_cross_answers_an_error(pair: tuple[Link, Link]) -> None:
    home, worker = pair

    async def a_lock() -> threading.Lock:
        return threading.Lock()

    async def a_local_function() -> object:
        return lambda: None

    home.on("lock", a_lock)
    home.on("function", a_local_function)
    for op in ("lock", "function"):
        with pytest.raises(RemoteError, match=f"^{op}: its result cannot be sent"):
            await asyncio.wait_for(worker.ask(op), 5)  # an error, not a hang
    home.on("ping", pong)
    assert await asyncio.wait_for(worker.ask("ping"), 5) == "pong"  # the link lives on


async def test_the_peer_closing_fails_what_waits_with_link_closed(
    pair: tuple[Link, Link],
) -> None:
    home, worker = pair
    never = asyncio.Event()
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await never.wait()

    home.on("hang", hang)
    waiting = [asyncio.create_task(worker.ask("hang")) for _ in range(3)]
    await asyncio.wait_for(started.wait(), 5)
    await home.close()  # the home's process is gone
    for task in waiting:
        with pytest.raises(LinkClosed, match="stopped before answering"):
            await asyncio.wait_for(task, 5)
    assert worker.closed.is_set()
    with pytest.raises(LinkClosed, match="is not running"):
        await worker.ask("hang")  # at once, not after a wait


async def test_on_lost_runs_before_anything_learns_the_peer_is_gone() -> None:
    home_end, worker_end = socket_pair()
    learned: list[str] = []

    async def learn() -> None:
        try:
            await worker.ask("hang")
        except LinkClosed:
            learned.append("the ask failed")

    lost: list[list[str]] = []
    worker = Link("the home's process", on_lost=lambda: lost.append(list(learned)))
    await worker.open(worker_end)
    waiting = asyncio.create_task(learn())
    await asyncio.sleep(0.05)
    home_end.close()  # the home's process killed
    await asyncio.wait_for(waiting, 5)
    assert lost == [[]], "called once, before the waiting ask learned it"
    await worker.close()
    ours = Link("ours", on_lost=lambda: lost.append(["again"]))
    await ours.open(socket_pair()[0])
    await ours.close()  # this side's own close is no loss
    assert lost == [[]]


# A worker whose link to the home's process breaks: nothing after it runs (a channel would
# confirm updates it could not hand over, and they were lost).
WORKER_SIDE = """
import asyncio, sys
from atlas.workers.child import end_with_the_home
from atlas.workers.link import Link, LinkClosed, adopt_fd

async def main():
    link = Link("the home's process", on_lost=end_with_the_home)
    await link.open(adopt_fd(int(sys.argv[1])))
    print("asking", flush=True)
    try:
        await link.ask("hang")
    except LinkClosed:
        print("went on after the home was gone", flush=True)

asyncio.run(main())
"""


async def test_a_worker_ends_at_once_when_the_home_is_gone() -> None:
    home_end, worker_end = socket_pair()
    os.set_inheritable(worker_end.fileno(), True)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WORKER_SIDE,
        str(worker_end.fileno()),
        pass_fds=[worker_end.fileno()],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    worker_end.close()
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 20) == b"asking\n"
    home_end.close()
    rest = await asyncio.wait_for(process.stdout.read(), 20)
    assert await process.wait() == 1
    assert rest == b""


def _fds_seen_by_a_child() -> set[int]:
    """The file descriptors a command started with close_fds=False holds."""
    listing = subprocess.run(
        ["ls", "/proc/self/fd"], close_fds=False, capture_output=True, text=True, check=True
    )
    return {int(name) for name in listing.stdout.split()}


def test_the_workers_end_is_not_inherited_by_a_command() -> None:
    home_end, worker_end = socket_pair()
    other_home, other_worker = socket.socketpair()
    try:
        for end in (worker_end, other_worker):
            os.set_inheritable(end.fileno(), True)  # as pass_fds leaves it in the worker
        # The check can fail: an inheritable descriptor is there in the command.
        assert other_worker.fileno() in _fds_seen_by_a_child()
        fd = worker_end.detach()
        adopted = adopt_fd(fd)
        try:
            assert adopted.fileno() == fd and not os.get_inheritable(fd)
            assert fd not in _fds_seen_by_a_child()
        finally:
            adopted.close()
    finally:
        for sock in (home_end, other_home, other_worker):
            sock.close()
