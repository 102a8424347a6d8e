"""Bad files, clear words (issue #19, item 3): damaged databases, wrong [channels.*] tables and
unknown tool names stop `atlas run` before it starts anything, naming the file, key and line;
`atlas doctor` says the same; read_file refuses what would block and pages huge lines in
bounded memory."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from atlas import cli, services
from atlas.doctor import run_checks
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.start_checks import check_before_start
from atlas.store.damage import DamagedDatabase, is_damage
from atlas.store.db import Database
from atlas.store.integrity import check_file
from atlas.tools.files import read_file
from atlas.tools.registry import RunContext
from tests.helpers import make_home, run_context


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under a folder: its mtime and content."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_atlas(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`atlas run`, which must stop before it starts anything (else this fails, not hangs)."""

    async def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("atlas run started its core despite a bad file")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "start_core", must_not_start)  # imported when it is reached
        code = cli.main(["--home", str(root), "run"])
    return code, capsys.readouterr().err


def a_real_database(path: Path, rows: int = 400) -> None:
    """A database of many pages in WAL mode, checkpointed: what a used atlas.db looks like."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.executemany("INSERT INTO notes (body) VALUES (?)", [("x" * 400,)] * rows)
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


# ---- damaged databases ------------------------------------------------------------------------


def test_garbage_conversations_db_stops_run_naming_it_and_touching_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "home"
    make_home(root)
    damaged = root / "bots" / "atlas" / "conversations.db"
    damaged.write_bytes(b"this is not a database\n" * 100)
    before = snapshot(root)
    code, err = run_atlas(root, capsys)
    assert code == 2
    assert f"{damaged} is damaged: it is not a SQLite database" in err
    assert f"sqlite3 {damaged} .recover" in err and "move" in err
    assert "Traceback" not in err
    assert snapshot(root) == before  # no atlas.db, no -wal or -shm, nothing changed


def test_truncated_atlas_db_stops_run_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "home"
    make_home(root)
    path = root / "atlas.db"
    a_real_database(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = snapshot(root)
    code, err = run_atlas(root, capsys)
    assert code == 2
    assert f"{path} is damaged: it is truncated ({len(data) // 2} bytes" in err
    assert f"sqlite3 {path} .recover" in err
    assert snapshot(root) == before


async def test_damage_behind_a_good_header_is_named_when_the_file_opens(tmp_path: Path) -> None:
    path = tmp_path / "atlas.db"
    a_real_database(path, rows=10)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # page 1's schema after the header: scrambled
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedDatabase) as caught:
        await Database(path, []).open()
    assert f"{path} is damaged: SQLite says:" in str(caught.value)
    assert ".recover" in str(caught.value)
    # A lock or a full disk is no damage: those keep SQLite's own error.
    assert not is_damage(sqlite3.OperationalError("database is locked"))


async def test_doctor_runs_quick_check_on_each_database(tmp_path: Path) -> None:
    root = tmp_path / "home"
    make_home(root)
    a_real_database(root / "atlas.db")
    assert check_file(root / "atlas.db", deadline=float("inf")).state == "ok"
    damaged = root / "bots" / "atlas" / "conversations.db"
    damaged.write_bytes(b"\0garbage" * 64)
    checks = await run_checks(root, offline=True)
    databases = [c for c in checks if c.name == "database"]
    assert [c.ok for c in databases] == [True, False]
    assert "quick_check ok" in databases[0].detail
    assert f"{damaged} is damaged" in databases[1].detail
    assert not damaged.with_name("conversations.db-wal").exists()


def test_quick_check_finds_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x TEXT)")
    con.execute("CREATE INDEX t_x ON t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(str(n) * 50,) for n in range(2000)])
    con.commit()
    con.close()
    data = bytearray(path.read_bytes())
    data[-4096 * 3 : -4096] = b"\xa5" * 8192  # two pages near the end
    path.write_bytes(bytes(data))
    verdict = check_file(path, deadline=float("inf"))
    assert verdict.state == "damaged"
    assert "quick_check found" in verdict.detail or "SQLite says" in verdict.detail


# ---- [channels.*] and tools ------------------------------------------------------------------


def add_to_bot_toml(root: Path, text: str) -> Path:
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + text)
    return bot_toml


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_unknown_channel_key_stops_run_with_file_key_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    root = tmp_path / "home"
    make_home(root)
    bot_toml = add_to_bot_toml(root, '\n[channels.telegram]\nallowed_user = ["1"]\n')
    before = snapshot(root)
    code, err = run_atlas(root, capsys)
    assert code == 2
    line = line_of(bot_toml, "allowed_user =")
    assert f"{bot_toml}: invalid settings" in err
    assert f"channels.telegram.allowed_user (line {line}): unknown key (known: " in err
    assert "allowed_users" in err
    assert snapshot(root) == before  # nothing started: no database made


def test_unset_token_variable_stops_start_naming_variable_key_and_line(tmp_path: Path) -> None:
    root = tmp_path / "home"
    make_home(root)
    bot_toml = add_to_bot_toml(root, '\n[channels.slack]\nbot_token_env = "MY_SLACK_TOKEN"\n')
    with pytest.raises(ConfigError) as caught:
        check_before_start(Home(root))
    line = line_of(bot_toml, "MY_SLACK_TOKEN")
    assert str(caught.value).startswith(
        f"{bot_toml}: channels.slack.bot_token_env (line {line}) names the environment "
        "variable 'MY_SLACK_TOKEN', which is not set"
    )


def test_webhook_without_its_url_stops_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    root = tmp_path / "home"
    make_home(root)
    bot_toml = add_to_bot_toml(root, '\n[channels.telegram]\nmode = "webhook"\n')
    with pytest.raises(ConfigError) as caught:
        check_before_start(Home(root))
    line = line_of(bot_toml, 'mode = "webhook"')
    assert f"channels.telegram.mode (line {line}) is 'webhook' but" in str(caught.value)
    assert "webhook_url is not set" in str(caught.value)


async def test_doctor_reports_channel_and_tool_mistakes(tmp_path: Path) -> None:
    root = tmp_path / "home"
    make_home(root)
    add_to_bot_toml(root, "\n[channels.telegram]\n")  # TELEGRAM_BOT_TOKEN unset
    checks = {c.name: c for c in await run_checks(root, offline=True)}
    assert not checks["bot atlas channels"].ok
    assert "'TELEGRAM_BOT_TOKEN', which is not set" in checks["bot atlas channels"].detail


def test_unknown_tool_names_stop_start_listing_the_known_ones(tmp_path: Path) -> None:
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    text = bot_toml.read_text().replace(
        "mode = ", 'tools = ["read_file", "read_files", "mcp__github__search"]\nmode = '
    )
    bot_toml.write_text(text)
    with pytest.raises(ConfigError) as caught:
        check_before_start(Home(root))
    message = str(caught.value)
    line = line_of(bot_toml, 'tools = ["read_file", "read_files"')
    assert message.startswith(
        f"{bot_toml}: tools (line {line}): unknown tool name(s) 'read_files', "
        "'mcp__github__search'; MCP tools are not listed here"
    )
    known = message.split("known: ")[1].split(", ")
    assert {"read_file", "run_command", "write_file"} <= set(known)


# ---- read_file: what blocks, and huge lines ---------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> RunContext:
    ctx = run_context(make_home(tmp_path / "home"))
    ctx.bot.workspace.mkdir(parents=True, exist_ok=True)
    return ctx


async def test_read_file_refuses_a_fifo_and_devices_before_opening(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(run.bot.workspace / "pipe")
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: (opened.append(str(path)), real_open(path, *a, **k))[1]
    )
    for path, kind in (
        ("pipe", "a named pipe (FIFO)"),
        ("/dev/zero", "a character device"),
        ("/dev/null", "a character device"),
    ):
        result = await read_file.invoke(run, {"path": path})
        assert result.is_error, path
        assert f"{path} is not a regular file but {kind}" in result.text
    assert opened == []  # stat said enough: nothing was opened


@pytest.mark.skipif(not Path("/proc/kmsg").exists(), reason="no /proc/kmsg here")
async def test_read_file_refuses_proc_kmsg_without_opening_it(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_open(path: object, *args: object, **kwargs: object) -> int:
        raise AssertionError(f"opened {path}")

    monkeypatch.setattr(os, "open", no_open)  # reading /proc/kmsg would take the kernel's log
    result = await read_file.invoke(run, {"path": "/proc/kmsg"})
    # Outside the bot's view (in /proc a file tool sees only system-wide figures): missing.
    assert result.is_error and result.text == "Error: /proc/kmsg: no such file"


async def test_read_file_pages_a_huge_single_line_in_bounded_memory(run: RunContext) -> None:
    size = 50 * 1024 * 1024
    path = run.bot.workspace / "one-line.txt"
    with path.open("wb") as f:
        f.write("é".encode() + b"x" * (size - 3) + b"\n")
    tracemalloc.start()
    try:
        result = await read_file.invoke(run, {"path": "one-line.txt"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.is_error
    assert result.text.startswith("     1\té" + "x" * 1999 + "… [line cut: ")
    assert f"[line cut: {size - 2 - 2000} more characters]" in result.text
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a 50 MB line"
    # The whole file was still hashed: an edit_file after this read is allowed.
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.state.file_hashes[str(path.resolve())] == digest
