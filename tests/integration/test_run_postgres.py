"""`atlas run` serves a home from PostgreSQL (issue 36): one machine, one node.

`atlas run` is a real child process over a home whose `[store] url` is a fresh database on the
tests' throwaway server, with the fake Telegram Bot API and the fake model server of the load
runs (scripts/loadkit.py, tests/fakes/load_fakes.py) on 127.0.0.1. A person sends two messages
in a row: each is answered once, in order; the messages and answers, the outbox rows (all
delivered), the gate's log and a routine's run are in PostgreSQL, and nothing of it in the
home's SQLite files. The daemon is stopped with SIGTERM and started again: one more message is
answered once, nothing is sent again and the routine does not fire again. A url whose server
cannot be reached stops `atlas run` at once, naming the url (never its password) and what
failed. A run lock whose session ends is taken again; one another run took meanwhile stops the
daemon.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from scripts.loadkit import (
    FIRST_CHAT,
    Fakes,
    bot_name,
    bot_token,
    free_port,
    token_env,
    write_home,
)

ATLAS = [sys.executable, "-m", "atlas.cli", "run"]
REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pw-not-in-any-message"  # $ATLAS_STORE_PASSWORD: the throwaway server trusts anyway
ROUTINE_TAG = "T0-9-1"


class AtlasRun:
    """`atlas run` as a child process, its output in a log file."""

    def __init__(self, home: Path, env: dict[str, str], log: Path) -> None:
        self.home, self.env, self.log = home, env, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                ATLAS, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_logged(self, text: str, *, after: int = 0, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text()[after:]:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"atlas run ended ({self.process.returncode}):\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged within {timeout:.0f} s:\n{self.text()}")
            await asyncio.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"atlas run did not stop on SIGTERM:\n{self.text()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    async with Fakes(bots=1, latency=0.3) as made:  # latency: the 2nd message meets a turn
        yield made


def environment(fakes: Fakes, home: Path) -> dict[str, str]:
    env = fakes.env(home)
    env[token_env(0)] = bot_token(0)
    env["ATLAS_STORE_PASSWORD"] = PASSWORD
    return env


def routine_due(at: datetime) -> str:
    return "\n".join(
        [
            f'schedule = "{at.strftime("%Y-%m-%dT%H:%M:%S+00:00")}"',
            f'bot = "{bot_name(0)}"',
            f'prompt = "{ROUTINE_TAG} say that the routine ran."',
            "",
            "[target]",
            f'channel = "telegram:{bot_name(0)}"',
            f'chat = "{FIRST_CHAT}"',
            "",
        ]
    )


def with_store_url(home: Path, url: str) -> None:
    config = home / "config.toml"
    config.write_text(config.read_text() + f'\n[store]\nurl = "{url}"\n')


def sqlite_messages(home: Path) -> int:
    """Messages in every bot's conversations.db (absent: none)."""
    total = 0
    for path in (home / "bots").glob("*/conversations.db"):
        with sqlite3.connect(path) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if "messages" in tables:
                total += db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return total


def sqlite_rows(home: Path, table: str) -> int:
    """Rows of one of atlas.db's tables (absent file or table: none)."""
    path = home / "atlas.db"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] if table in tables else 0


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def answers_in_order(fakes: Fakes, tags: list[str]) -> None:
    """Each tag's reply came once, in the order the tags were sent."""
    telegram = fakes.telegrams[0]
    await telegram.wait_for(
        lambda: all(any(t in text for text in telegram.sent_texts(FIRST_CHAT)) for t in tags),
        timeout=30,
    )
    texts = telegram.sent_texts(FIRST_CHAT)
    firsts = [next(i for i, text in enumerate(texts) if tag in text) for tag in tags]
    assert firsts == sorted(firsts), texts
    replies = fakes.replies_per_tag()
    assert all(replies[tag] == 1 for tag in tags), replies


async def test_atlas_run_serves_a_home_from_postgresql_and_resumes_after_sigterm(
    tmp_path: Path, fakes: Fakes, postgres_url: str
) -> None:
    home = tmp_path / "home"
    due = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
    fakes.write_home(home, conversations=1, routines={"report": routine_due(due)})
    with_store_url(home, postgres_url)
    daemon = AtlasRun(home, environment(fakes, home), tmp_path / "atlas-run.log")
    telegram = fakes.telegrams[0]
    try:
        daemon.start()
        await daemon.wait_logged("ready; stop with Ctrl-C or SIGTERM")
        assert "store: PostgreSQL at postgresql://atlas@127.0.0.1" in daemon.text()
        # Two messages in a row: the second comes while the first's turn (a read_file call,
        # which the gate decides) is with the model, so each has a turn and an answer of its own.
        await telegram.push(telegram.message("T0-0-1 [tool] read note.txt", user_id=FIRST_CHAT))
        await until(lambda: "T0-0-1" in fakes.model.first_request_at)
        await telegram.push(telegram.message("T0-0-2 and then this", user_id=FIRST_CHAT))
        await answers_in_order(fakes, ["T0-0-1", "T0-0-2"])
        # The routine due during the run fires once and reports to the chat.
        await telegram.wait_for(
            lambda: any(ROUTINE_TAG in text for text in telegram.sent_texts(FIRST_CHAT)),
            timeout=40,
        )
        db = await asyncpg.connect(postgres_url)
        try:
            for _ in range(100):  # the run's row is closed once its report is delivered
                runs = await db.fetch("SELECT status, delivery FROM routine_runs")
                if runs and all((row["delivery"] or "").startswith("delivered") for row in runs):
                    break
                await asyncio.sleep(0.1)
            assert [(r["status"], r["delivery"]) for r in runs] == [
                ("ok", f"delivered to telegram:{bot_name(0)}:{FIRST_CHAT}")
            ]
            users = await db.fetch(
                "SELECT content FROM messages WHERE role = 'user' AND bot = $1 ORDER BY id",
                bot_name(0),
            )
            said = [row["content"] for row in users]
            assert any("T0-0-1" in text for text in said) and any("T0-0-2" in text for text in said)
            answers = await db.fetchval(
                "SELECT COUNT(*) FROM messages WHERE role = 'assistant' AND tool_calls IS NULL "
                "AND content ~ 'T0-0-[12]'"
            )
            assert answers >= 2
            states = await db.fetch("SELECT state, COUNT(*) AS n FROM outbox GROUP BY state")
            assert {row["state"] for row in states} == {"delivered"}, states
            gate = await db.fetch("SELECT tool, verdict FROM gate_decisions")
            assert ("read_file", "allow") in [(r["tool"], r["verdict"]) for r in gate], gate
        finally:
            await db.close()
        # Nothing of it in the home's SQLite files.
        assert sqlite_messages(home) == 0
        for table in ("gate_decisions", "routine_runs"):
            assert sqlite_rows(home, table) == 0, table
        sent_before = len(telegram.sent_texts())

        assert daemon.stop() == 0
        mark = len(daemon.text())
        daemon.start()
        await daemon.wait_logged("ready; stop with Ctrl-C or SIGTERM", after=mark)
        await telegram.push(telegram.message("T0-0-3 one more", user_id=FIRST_CHAT))
        await answers_in_order(fakes, ["T0-0-1", "T0-0-2", "T0-0-3"])
        await asyncio.sleep(1.5)  # a resend or a second fire would come about now
        assert len(telegram.sent_texts()) == sent_before + 1, telegram.sent_texts()
        assert fakes.replies_per_tag()[ROUTINE_TAG] == 1
        db = await asyncpg.connect(postgres_url)
        try:
            assert await db.fetchval("SELECT COUNT(*) FROM routine_runs") == 1
            pending = await db.fetchval("SELECT COUNT(*) FROM outbox WHERE state <> 'delivered'")
            assert pending == 0
        finally:
            await db.close()
        assert sqlite_messages(home) == 0
        assert daemon.stop() == 0
    finally:
        daemon.kill()
    assert PASSWORD not in daemon.text()


def test_atlas_run_stops_at_once_when_the_server_cannot_be_reached(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_home(  # the home of the run above, pointed nowhere
        home,
        bots=1,
        model_url="http://127.0.0.1:9/v1",
        telegram_urls=["http://127.0.0.1:9"],
        allowed_users=[FIRST_CHAT],
        concurrent_turns=1,
    )
    port = free_port()  # nothing listens there
    with_store_url(home, f"postgresql://atlas@127.0.0.1:{port}/atlas")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ATLAS_HOME": str(home),
        "ATLAS_WORKERS": "1",
        token_env(0): bot_token(0),
        "ATLAS_STORE_PASSWORD": PASSWORD,
    }
    started = time.monotonic()
    done = subprocess.run(ATLAS, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert time.monotonic() - started < 30, "it should stop at once, not retry"
    assert f"cannot reach the PostgreSQL store postgresql://atlas@127.0.0.1:{port}/atlas" in said
    assert "Connect call failed" in said or "refused" in said.lower(), said
    assert PASSWORD not in said
    assert "ready" not in said


async def test_atlas_chat_and_the_clis_use_the_homes_postgresql_database(
    tmp_path: Path, fakes: Fakes, postgres_url: str
) -> None:
    """`atlas chat` answers from PostgreSQL and stores there; `atlas trust log` and `atlas
    search` read it back from there, `atlas routines` keeps routines there; the home's SQLite
    files stay untouched."""
    home = tmp_path / "home"
    fakes.write_home(home, conversations=1)
    with_store_url(home, postgres_url)
    env = environment(fakes, home)

    def atlas(*args: str, given: str = "") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "atlas.cli", *args]
        return subprocess.run(
            command, input=given, env=env, cwd=REPO, capture_output=True, text=True, timeout=90
        )

    chat = await asyncio.to_thread(atlas, "chat", given="T0-1-1 [tool] read note.txt\n")
    assert chat.returncode == 0, chat.stdout + chat.stderr
    assert "T0-1-1" in chat.stdout.split("you> T0-1-1", 1)[1], chat.stdout
    db = await asyncpg.connect(postgres_url)
    try:
        rows = await db.fetch(
            "SELECT c.channel, m.role FROM messages m JOIN conversations c "
            "ON c.id = m.conversation_id ORDER BY m.id"
        )
    finally:
        await db.close()
    assert [row["channel"] for row in rows] == ["console"] * len(rows) and len(rows) == 4
    assert sqlite_messages(home) == 0 and sqlite_rows(home, "gate_decisions") == 0
    log = await asyncio.to_thread(atlas, "trust", "log")
    assert log.returncode == 0 and "read_file ALLOW" in log.stdout, log.stdout + log.stderr
    found = await asyncio.to_thread(atlas, "search", "note")
    assert found.returncode == 0 and "T0-1-1" in found.stdout, found.stdout + found.stderr
    later = datetime.now(UTC) + timedelta(days=1)
    (home / "routines" / "report.toml").write_text(routine_due(later))
    reload = await asyncio.to_thread(atlas, "routines", "reload")
    assert reload.returncode == 0 and "created: report" in reload.stdout, reload.stdout
    listed = await asyncio.to_thread(atlas, "routines", "list")
    assert listed.returncode == 0 and "report" in listed.stdout, listed.stdout + listed.stderr
    db = await asyncpg.connect(postgres_url)
    try:
        assert await db.fetchval("SELECT name FROM routines") == "report"
    finally:
        await db.close()
    assert sqlite_rows(home, "routines") == 0


async def test_a_turn_cut_by_sigkill_is_answered_once_after_the_restart(
    tmp_path: Path, fakes: Fakes, postgres_url: str
) -> None:
    """Recovery reads PostgreSQL: the person's message stored, its turn killed with the
    model's answer still coming; the next start answers it, once."""
    home = tmp_path / "home"
    fakes.write_home(home, conversations=1)
    with_store_url(home, postgres_url)
    daemon = AtlasRun(home, environment(fakes, home), tmp_path / "atlas-run.log")
    telegram = fakes.telegrams[0]
    try:
        daemon.start()
        await daemon.wait_logged("ready; stop with Ctrl-C or SIGTERM")
        fakes.model.latency = 5.0  # the answer is still with the model when the kill comes
        await telegram.push(telegram.message("T0-0-1 are you there", user_id=FIRST_CHAT))
        await until(lambda: "T0-0-1" in fakes.model.first_request_at)
        daemon.kill()
        fakes.model.latency = 0.0
        assert not telegram.sent_texts(FIRST_CHAT)
        mark = len(daemon.text())
        daemon.start()
        await daemon.wait_logged("ready; stop with Ctrl-C or SIGTERM", after=mark)
        assert "turns: 1 resumed" in daemon.text()[mark:], daemon.text()[mark:]
        await answers_in_order(fakes, ["T0-0-1"])
        await asyncio.sleep(1.0)
        assert fakes.replies_per_tag()["T0-0-1"] == 1
        assert daemon.stop() == 0
    finally:
        daemon.kill()
    assert sqlite_messages(home) == 0


async def _cut_run_lock(url: str, *, then_take: bool) -> asyncpg.Connection:
    """End the daemon's run-lock session, as a server restart or a cut network would; with
    `then_take`, this connection queues for the lock first, as a second plain `atlas run`
    starting in that moment would, and holds it (close the returned connection)."""
    admin = await asyncpg.connect(url)
    lock = "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted"
    key = await admin.fetchval(lock)
    ended = await admin.fetch(
        "SELECT pg_terminate_backend(pid) FROM pg_locks "
        "WHERE locktype = 'advisory' AND objid::bigint = $1",
        key,
    )
    assert len(ended) == 1
    if then_take:
        await admin.execute("SELECT pg_advisory_lock($1)", key)  # waits for the session's end
    return admin


async def test_atlas_run_takes_its_run_lock_again_and_stops_when_another_took_it(
    tmp_path: Path, fakes: Fakes, postgres_url: str
) -> None:
    home = tmp_path / "home"
    fakes.write_home(home, conversations=1)
    with_store_url(home, postgres_url)
    daemon = AtlasRun(home, environment(fakes, home), tmp_path / "atlas-run.log")
    try:
        daemon.start()
        await daemon.wait_logged("ready; stop with Ctrl-C or SIGTERM")
        await (await _cut_run_lock(postgres_url, then_take=False)).close()
        await daemon.wait_logged("the run lock is held again", timeout=20)
        telegram = fakes.telegrams[0]
        await telegram.push(telegram.message("T0-0-1 still here?", user_id=FIRST_CHAT))
        await answers_in_order(fakes, ["T0-0-1"])

        other = await _cut_run_lock(postgres_url, then_take=True)
        try:
            assert daemon.process is not None
            code = await asyncio.to_thread(daemon.process.wait, 30)
        finally:
            await other.close()
        assert code == 2, daemon.text()
        assert "this process lost the home's run lock and could not take it again" in daemon.text()
        assert "stopped cleanly" in daemon.text()
    finally:
        daemon.kill()
