"""HomeEngines (atlas/store/home_engines.py): the one place a home's engines are opened.

No `[store] url`: today's objects over atlas.db and each bot's conversations.db. A url: one
PgServer and the PostgreSQL side of every seam, which the runtime, the dispatcher's outbox and
the CLIs take; atlas.db's own SQL reached on such a home is refused by name, and a home with a
url is never opened on its SQLite files by default.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.access import Access, request_pairing
from atlas.channels.chat_common import ChatGenerations, SqliteGenerations
from atlas.channels.pairing_store import SqlitePairing
from atlas.cli import main
from atlas.dashboard.reads import SqliteDashboardReads
from atlas.dispatch import Dispatcher
from atlas.errors import AtlasError, NotOnPostgres
from atlas.executors.record_rows import SqliteRecordRows
from atlas.home import Home
from atlas.outbox.engine import SqliteOutboxRows
from atlas.providers.scripted import ScriptedModel
from atlas.routines.store import RoutineStore
from atlas.runtime import Runtime
from atlas.store.conversations import ConversationStore
from atlas.store.home_db import HomeStore
from atlas.store.home_engines import HomeEngines
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.dashboard import PgDashboardReads
from atlas.store.pg.executors import PgRecordRows
from atlas.store.pg.generations import PgGenerations
from atlas.store.pg.home_state import PgHomeAudit
from atlas.store.pg.outbox import PgOutboxRows
from atlas.store.pg.pairing import PgPairing
from atlas.store.pg.routines import PgRoutineStore
from atlas.workers.plan import one_process_on_postgres
from tests.helpers import BASE_CONFIG, make_home


def with_url(home: Home, url: str) -> Home:
    text = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    home.config_path.write_text(text + f'\n[store]\nurl = "{url}"\n', encoding="utf-8")
    return Home(home.root)


async def test_no_url_gives_todays_objects_over_the_homes_files(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    engines = await HomeEngines.open(home)
    try:
        assert not engines.on_postgres and engines.server is None
        assert isinstance(engines.audit, HomeStore) and engines.audit.path == home.db_path
        assert isinstance(engines.pairing, SqlitePairing)
        assert isinstance(engines.records, SqliteRecordRows)
        assert isinstance(engines.reads, SqliteDashboardReads)
        assert isinstance(engines.routines, RoutineStore)
        assert isinstance(engines.generations, SqliteGenerations)
        assert engines.outbox_rows is None
        bot = home.bot(None)
        store = engines.conversations(bot)
        assert isinstance(store, ConversationStore) and store.path == bot.db_path
    finally:
        await engines.close()
    runtime = Runtime(home, model=ScriptedModel([]))
    try:
        assert isinstance(runtime.audit, HomeStore)
        assert isinstance(Dispatcher(runtime, {}).outbox.rows, SqliteOutboxRows)
    finally:
        await runtime.close()


async def test_a_url_gives_every_seams_postgresql_side(tmp_path: Path, postgres_url: str) -> None:
    home = with_url(make_home(tmp_path / "home"), postgres_url)
    engines = await HomeEngines.open(home, epoch=7)
    runtime = Runtime(home, model=ScriptedModel([]), engines=engines)
    try:
        assert engines.on_postgres and engines.where == postgres_url
        assert isinstance(runtime.audit, PgHomeAudit)
        assert isinstance(engines.pairing, PgPairing)
        assert isinstance(engines.records, PgRecordRows)
        assert isinstance(engines.reads, PgDashboardReads)
        assert isinstance(engines.routines, PgRoutineStore)
        assert isinstance(engines.generations, PgGenerations)
        store = await runtime.store(home.bot(None))
        assert isinstance(store, PgConversationStore) and store.bot == home.bot(None).name
        outbox = Dispatcher(runtime, {}).outbox
        assert isinstance(outbox.rows, PgOutboxRows) and outbox.epoch_of("atlas") == 7
        # What is not behind a seam yet says so, rather than opening the SQLite files.
        with pytest.raises(NotOnPostgres, match=r"atlas\.db's SQL \(.*\) is not on PostgreSQL"):
            await runtime.audit.call(lambda db: db.execute("SELECT 1"))
        with pytest.raises(NotOnPostgres, match="conversations.db SQL is not on PostgreSQL"):
            store.db  # noqa: B018
    finally:
        await runtime.close()
    assert not home.db_path.exists() or home.db_path.stat().st_size == 0
    assert not home.bot(None).db_path.exists()


def test_a_home_with_a_url_is_never_opened_on_its_sqlite_files(tmp_path: Path) -> None:
    home = with_url(make_home(tmp_path / "home"), "postgresql://atlas@127.0.0.1:1/atlas")
    with pytest.raises(AtlasError, match=r"this home's store is PostgreSQL \(postgresql://"):
        HomeEngines(home)
    with pytest.raises(AtlasError, match="HomeEngines.open"):
        Runtime(home, model=ScriptedModel([]))


async def test_an_unreachable_server_is_named_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scripts.loadkit import free_port

    port = free_port()
    home = with_url(make_home(tmp_path / "home"), f"postgresql://atlas@127.0.0.1:{port}/atlas")
    monkeypatch.setenv("ATLAS_STORE_PASSWORD", "secret-pw")
    with pytest.raises(AtlasError) as raised:
        await HomeEngines.open(home)
    said = str(raised.value)
    assert f"cannot reach the PostgreSQL store postgresql://atlas@127.0.0.1:{port}/atlas" in said
    assert "secret-pw" not in said


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def either_home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    home = make_home(tmp_path / "home")
    if request.param == "postgres":
        home = with_url(home, request.getfixturevalue("postgres_url"))
    return home


async def test_new_generations_are_kept_on_both_engines(either_home: Home) -> None:
    engines = await HomeEngines.open(either_home)
    try:
        first = ChatGenerations(engines.generations, "telegram:atlas")
        assert await first.chat_key("42") == "42"
        assert await first.bump("42") == 1 and await first.bump("42") == 2
        assert await first.bump("42", "t", "u") == 1
        later = ChatGenerations(engines.generations, "telegram:atlas")  # a restart: read again
        assert await later.chat_key("42") == "42#2"
        assert await later.chat_key("42", "t", "u") == "42#1"
        assert await ChatGenerations(engines.generations, "slack:atlas").chat_key("42") == "42"
    finally:
        await engines.close()


def test_atlas_pairing_approves_where_the_home_keeps_it(
    either_home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    async def stranger() -> str:
        engines = await HomeEngines.open(either_home)
        try:
            made = await request_pairing(engines.pairing, "atlas", "telegram", "77")
            assert made is not None
            return made.code
        finally:
            await engines.close()

    async def allowed() -> bool:
        engines = await HomeEngines.open(either_home)
        try:
            return await Access(engines.pairing, "atlas", "telegram", []).is_allowed("77")
        finally:
            await engines.close()

    code = asyncio.run(stranger())
    assert main(["--home", str(either_home.root), "pairing", "approve", code]) == 0
    assert f"approved: {code}" in capsys.readouterr().out
    assert asyncio.run(allowed())


def test_workers_are_one_process_on_postgresql(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = make_home(tmp_path / "home")
    assert one_process_on_postgres(home, 3) == 3  # SQLite: as many as wanted
    home = with_url(home, "postgresql://atlas@127.0.0.1:5432/atlas")
    with caplog.at_level(logging.WARNING, logger="atlas.workers.plan"):
        assert one_process_on_postgres(home, 3) == 1
        assert one_process_on_postgres(home, 1) == 1
    [record] = caplog.records
    assert "workers: 1, not 3: a home whose store is PostgreSQL runs in one process" in (
        record.getMessage()
    )


async def test_the_dashboard_reads_a_postgresql_homes_bots_without_their_files(
    tmp_path: Path,
) -> None:
    """Every bot's conversations are in the database: no file says who talked; the pages ask
    the runtime's store (its PostgreSQL side), never a file (tests/unit/test_dashboard_postgres.py
    renders them from PostgreSQL)."""
    from tests.dashboard_rig import dashboard_rig

    asked: list[str] = []

    async def open_store(bot: Any) -> str:
        asked.append(bot.name)
        return f"the store of {bot.name}"

    async with dashboard_rig(tmp_path / "home", open_store=open_store) as rig:
        bot = rig.home.bot("atlas")
        assert not bot.db_path.exists()
        assert await rig.dashboard.store(bot) is None  # SQLite: never talked, no file
        rig.dashboard.home = with_url(rig.home, "postgresql://atlas@127.0.0.1:5432/atlas")
        assert await rig.dashboard.store(bot) == "the store of atlas"
        assert asked == ["atlas"] and not bot.db_path.exists()


def test_a_postgresql_homes_start_checks_skip_its_sqlite_files(tmp_path: Path) -> None:
    """It opens none of them: a damaged file left from before the move does not stop it."""
    from atlas.start_checks import check_before_start
    from atlas.store.damage import DamagedDatabase

    home = make_home(tmp_path / "home")
    home.bot(None).db_path.parent.mkdir(parents=True, exist_ok=True)
    home.bot(None).db_path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 300)
    with pytest.raises(DamagedDatabase):
        check_before_start(home)
    check_before_start(with_url(home, "postgresql://atlas@127.0.0.1:5432/atlas"))
