"""Worker processes (issue #24): `atlas run` with `[daemon] workers = 2` serves its bots from two
processes. Each bot answers on Telegram from the process that owns it, the worker's gate
decisions land in the one atlas.db the home's process writes, a routine of a worker's bot runs
there and reports, and a worker killed mid-turn is started again and answers the turn. Real
aiogram and openai against the fakes on 127.0.0.1; the worker is a real child process."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.daemon import serve
from atlas.home import Home
from atlas.workers.plan import Placement
from scripts.loadkit import FIRST_CHAT, Fakes, bot_name
from scripts.loadkit import worker_pids as loadkit_worker_pids
from tests.helpers import worker_fakes

BOTS = 3  # atlas and bot02 in the home's process, bot01 in worker 1


def worker_pids() -> list[int]:
    """This process's children that are Atlas workers (the daemon runs in the test's process)."""
    return loadkit_worker_pids(os.getpid())


async def until(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fakes]:
    async with worker_fakes(monkeypatch, BOTS) as made:
        yield made


def two_worker_home(root: Path, fakes: Fakes, routines: dict[str, str] | None = None) -> Home:
    fakes.write_home(root, conversations=2, routines=routines, workers=2)
    return Home(root)


async def ask(fakes: Fakes, index: int, text: str, chat: int = FIRST_CHAT) -> None:
    telegram = fakes.telegrams[index]
    before = len(telegram.sent_texts(chat))
    await telegram.push(telegram.message(text, user_id=chat))
    await telegram.wait_for(lambda: len(telegram.sent_texts(chat)) > before, timeout=30)


async def test_each_bot_answers_from_its_worker_and_atlas_db_has_one_writer(
    tmp_path: Path, fakes: Fakes
) -> None:
    home = two_worker_home(tmp_path / "home", fakes)
    assert Placement.of(home, 2).shares == (("atlas", "bot02"), ("bot01",))
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: len(worker_pids()) == 1)
        [child] = worker_pids()
        for index in range(BOTS):  # "[tool]": a read_file call first, so the gate decides
            await ask(fakes, index, f"T{index}-0-1 [tool] read note.txt")
            assert f"T{index}-0-1" in fakes.telegrams[index].sent_texts(FIRST_CHAT)[-1]
        # Only the home's process has atlas.db open; the worker's decisions are in it.
        open_files = {os.readlink(fd) for fd in Path(f"/proc/{child}/fd").iterdir()}
        assert not any(path.endswith("atlas.db") for path in open_files), open_files
        assert any(path.endswith("bots/bot01/conversations.db") for path in open_files)
        with sqlite3.connect(home.db_path) as db:
            bots = {row[0] for row in db.execute("SELECT bot FROM gate_decisions")}
        assert bots == {bot_name(i) for i in range(BOTS)}
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)
    assert worker_pids() == [], "the worker stopped with the daemon"


async def test_a_routine_of_a_workers_bot_runs_there_and_reports(
    tmp_path: Path, fakes: Fakes
) -> None:
    due = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    routine = "\n".join(
        [
            f'schedule = "{due.strftime("%Y-%m-%dT%H:%M:%S+00:00")}"',
            'bot = "bot01"',
            'prompt = "Say that the routine ran."',
            "",
            "[target]",
            'channel = "telegram:bot01"',
            f'chat = "{FIRST_CHAT}"',
            "",
        ]
    )
    home = two_worker_home(tmp_path / "home", fakes, routines={"report": routine})
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        telegram = fakes.telegrams[1]
        await telegram.wait_for(lambda: telegram.sent_texts(FIRST_CHAT), timeout=30)

        def runs() -> list[tuple[str, str]]:
            with sqlite3.connect(home.db_path) as db:
                return list(db.execute("SELECT status, delivery FROM routine_runs"))

        await until(lambda: any((delivery or "").startswith("delivered") for _, delivery in runs()))
        [(status, delivery)] = runs()
        assert (status, delivery) == ("ok", "delivered to telegram:bot01:5000")
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)


async def test_a_worker_killed_mid_turn_is_restarted_and_the_turn_is_answered(
    tmp_path: Path, fakes: Fakes
) -> None:
    home = two_worker_home(tmp_path / "home", fakes)
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: len(worker_pids()) == 1)
        [first] = worker_pids()
        await ask(fakes, 1, "T1-0-1 hello")
        fakes.model.latency = 3.0  # the next turn is still with the model when the kill comes
        telegram = fakes.telegrams[1]
        await telegram.push(telegram.message("T1-0-2 are you there", user_id=FIRST_CHAT))
        await until(lambda: "T1-0-2" in fakes.model.first_request_at, timeout=15)
        os.kill(first, signal.SIGKILL)
        fakes.model.latency = 0.0
        await until(lambda: worker_pids() not in ([], [first]), timeout=20)
        await telegram.wait_for(
            lambda: any("T1-0-2" in text for text in telegram.sent_texts(FIRST_CHAT)), timeout=30
        )
        # The other bots never stopped: the home's process answers throughout.
        await ask(fakes, 0, "T0-0-1 still here?")
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)


SPREAD_CHATS = 40  # enough at once for both processes to write the one store together


@pytest.fixture
async def one_bot_fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fakes]:
    async with worker_fakes(monkeypatch, 1) as made:
        yield made


def spread_home(root: Path, fakes: Fakes) -> Home:
    fakes.write_home(root, conversations=SPREAD_CHATS, workers=2, spread=True)
    return Home(root)


def replies_by_chat(fakes: Fakes) -> dict[int, list[str]]:
    telegram = fakes.telegrams[0]
    return {
        chat: telegram.sent_texts(chat) for chat in range(FIRST_CHAT, FIRST_CHAT + SPREAD_CHATS)
    }


async def test_a_spread_bots_conversations_run_in_both_processes_each_answered_once(
    tmp_path: Path, one_bot_fakes: Fakes
) -> None:
    fakes = one_bot_fakes
    home = spread_home(tmp_path / "home", fakes)
    placement = Placement.of(home, 2)
    assert placement.spread == {"atlas"} and placement.shares == (("atlas",), ())
    shares = {
        placement.share_for(Address("atlas", "telegram:atlas", str(chat)))
        for chat in range(FIRST_CHAT, FIRST_CHAT + SPREAD_CHATS)
    }
    assert shares == {0, 1}, "the chats of this test fall in both shares"
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: len(worker_pids()) == 1)
        [child] = worker_pids()
        telegram = fakes.telegrams[0]
        for chat in range(FIRST_CHAT, FIRST_CHAT + SPREAD_CHATS):  # all at once
            await telegram.push(telegram.message(f"T0-{chat}-1 [tool] read note.txt", user_id=chat))
        await telegram.wait_for(lambda: all(replies_by_chat(fakes).values()), timeout=60)
        for chat, texts in replies_by_chat(fakes).items():
            assert len(texts) == 1 and f"T0-{chat}-1" in texts[0], (chat, texts)
        # The worker held the bot's conversations of its share: it has the store open, and its
        # gate decisions are in atlas.db, which only the home's process opens.
        open_files = {os.readlink(fd) for fd in Path(f"/proc/{child}/fd").iterdir()}
        assert any(path.endswith("bots/atlas/conversations.db") for path in open_files)
        assert not any(path.endswith("atlas.db") for path in open_files)
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)


async def test_a_killed_worker_recovers_only_its_share_of_a_spread_bot(
    tmp_path: Path, one_bot_fakes: Fakes
) -> None:
    fakes = one_bot_fakes
    home = spread_home(tmp_path / "home", fakes)
    placement = Placement.of(home, 2)
    chats = range(FIRST_CHAT, FIRST_CHAT + SPREAD_CHATS)

    def share_of(chat: int) -> int:
        return placement.share_for(Address("atlas", "telegram:atlas", str(chat)))

    worker_chat = next(c for c in chats if share_of(c) == 1)
    home_chat = next(c for c in chats if share_of(c) == 0)
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: len(worker_pids()) == 1)
        [first] = worker_pids()
        telegram = fakes.telegrams[0]
        for chat in chats:
            await telegram.push(telegram.message(f"T0-{chat}-1 hello", user_id=chat))
        await telegram.wait_for(lambda: all(replies_by_chat(fakes).values()), timeout=60)
        # A turn in each process is with the model when the worker is killed: the restarted
        # worker resumes its own, and leaves the home's process's alone (it is still running).
        fakes.model.latency = 3.0
        for chat in (worker_chat, home_chat):
            await telegram.push(telegram.message(f"T0-{chat}-2 again", user_id=chat))
        for chat in (worker_chat, home_chat):
            await until(lambda chat=chat: f"T0-{chat}-2" in fakes.model.first_request_at)
        os.kill(first, signal.SIGKILL)
        fakes.model.latency = 0.0
        await telegram.wait_for(
            lambda: any(f"T0-{worker_chat}-2" in t for t in telegram.sent_texts(worker_chat)),
            timeout=40,
        )
        await asyncio.sleep(1.0)  # time for a wrong second answer or resume to show
        await telegram.wait_for(
            lambda: any(f"T0-{home_chat}-2" in t for t in telegram.sent_texts(home_chat))
        )
        for chat, texts in replies_by_chat(fakes).items():
            expected = 2 if chat in (worker_chat, home_chat) else 1
            assert len(texts) == expected, (chat, texts)
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)


async def test_status_on_telegram_shows_the_mode_the_worker_holds_for_a_spread_conversation(
    tmp_path: Path, one_bot_fakes: Fakes
) -> None:
    """The bot's channel runs in the home's process; this chat's conversation in the worker,
    where /mode set it: /status, answered by the channel, asks the worker."""
    fakes = one_bot_fakes
    home = spread_home(tmp_path / "home", fakes)
    placement = Placement.of(home, 2)
    chat = next(
        c
        for c in range(FIRST_CHAT, FIRST_CHAT + SPREAD_CHATS)
        if placement.share_for(Address("atlas", "telegram:atlas", str(c))) == 1
    )
    assert placement.owner("atlas") == 0
    bots_mode = home.bot("atlas").settings.mode
    wanted = next(m for m in ("read-only", "ask", "auto") if m != bots_mode)
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: len(worker_pids()) == 1)
        await ask(fakes, 0, f"/mode {wanted}", chat=chat)
        assert f"Mode for this conversation: {wanted}." in fakes.telegrams[0].sent_texts(chat)[-1]
        await ask(fakes, 0, "/status", chat=chat)
        status = fakes.telegrams[0].sent_texts(chat)[-1]
        assert f"Mode:</b> {wanted}" in status, status
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)


async def test_atlas_run_forks_its_worker_which_answers_is_restarted_afresh_and_stops(
    tmp_path: Path, fakes: Fakes
) -> None:
    """`atlas run` itself (not `serve` in this test's process, which spawns): its worker is
    forked from the home's process once that has imported what the bots use, answers its
    bot, is started again as a fresh interpreter when killed, and stops with the daemon."""
    root = tmp_path / "home"
    fakes.write_home(root, conversations=1, workers=2)
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        daemon = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "atlas.cli",
            "run",
            env=fakes.env(root, workers=2),
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )

    def workers() -> list[int]:
        return loadkit_worker_pids(daemon.pid)

    def command_line(pid: int) -> bytes:
        return Path(f"/proc/{pid}/cmdline").read_bytes()

    try:
        await until(lambda: len(workers()) == 1, timeout=30)
        [forked] = workers()
        assert Path(f"/proc/{forked}/comm").read_text().strip() == "atlas-worker1"
        assert command_line(forked) == command_line(daemon.pid), "forked, not a new interpreter"
        await ask(fakes, 1, "T1-0-1 hello")  # bot01: worker 1's
        os.kill(forked, signal.SIGKILL)
        await until(lambda: workers() not in ([], [forked]), timeout=20)
        [spawned] = workers()
        assert b"atlas.workers.child" in command_line(spawned), "a restart starts afresh"
        await ask(fakes, 1, "T1-0-2 hello again")
        await ask(fakes, 0, "T0-0-1 and you?")  # the home's own bot answered throughout
    finally:
        if daemon.returncode is None:
            daemon.terminate()
        code = await asyncio.wait_for(daemon.wait(), 30)
    written = log_path.read_text()
    assert code == 0, written[-2000:]
    assert "stopped cleanly" in written
    assert not Path(f"/proc/{spawned}").exists(), "the worker stopped with the daemon"
