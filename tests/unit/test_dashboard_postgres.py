"""The dashboard's pages read the home's shared state from PostgreSQL (atlas/store/pg/dashboard.py)
and render the same as from atlas.db for the same rows: the gate's log on Trust (filtered and
paged), the pairing requests waiting on Home, the people's names on Conversations, the ended
subagents on Workbench."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from atlas.dashboard.reads import SqliteDashboardReads
from atlas.providers.base import Message
from atlas.store.db import insert_dict
from atlas.store.home_db import HomeStore
from atlas.store.pg.dashboard import PgDashboardReads
from atlas.store.pg.server import PgServer
from tests.dashboard_rig import dashboard_rig
from tests.helpers import open_store_for_tests

pytestmark = pytest.mark.postgres

NOW = datetime.now(UTC)
PAGES = (
    "/trust",
    "/trust?verdict=deny",
    "/trust?q=DEPLOY",  # case ignored, as SQLite's LIKE does
    "/trust?bot=helper&answered_by=guardian",
    "/trust?before=3",
    "/",
    "/conversations?bot=atlas",
    "/workbench",
    "/workbench?page=2",
)


def _rows() -> dict[str, list[dict[str, Any]]]:
    """The same shared state for both homes, times fixed so both render alike."""
    gate = [
        {
            "at": f"2026-01-0{n % 9 + 1}T10:00:00.000000+00:00",
            "bot": "helper" if n % 3 == 0 else "atlas",
            "conversation_id": n,
            "run_kind": "conversation",
            "tool": "run_command",
            "arguments_digest": f"{n:04x}",
            "summary": "make deploy" if n % 2 else f"ls {n}",
            "verdict": "deny" if n % 4 == 0 else "allow",
            "rule": "ask",
            "reason": "100%_sure" if n == 5 else "rule",
            "answered_by": "guardian" if n % 3 == 0 else "user",
        }
        for n in range(1, 8)
    ]

    def code(code: str, user: str, name: str, status: str, created: datetime) -> dict[str, Any]:
        return {
            "code": code,
            "bot": "atlas",
            "platform": "telegram",
            "user_id": user,
            "user_name": name,
            "chat": user,
            "created_at": created.isoformat(),
            "expires_at": (created + timedelta(hours=1)).isoformat(),
            "status": status,
            "decided_at": "",
        }

    codes = [
        code("AAAA2222", "41", "Old Name", "approved", NOW - timedelta(days=2)),
        code("BBBB3333", "42", "Waiting Wanda", "pending", NOW - timedelta(minutes=5)),
        code("CCCC4444", "43", "Late Larry", "pending", NOW - timedelta(hours=3)),
    ]
    paired = [
        {
            "bot": "atlas",
            "platform": "telegram",
            "user_id": "41",
            "user_name": "Paired Pat",
            "code": "AAAA2222",
            "approved_at": (NOW - timedelta(days=1)).isoformat(),
        }
    ]
    delegations = [
        {
            "id": f"sa-{n:02d}",
            "batch": "b",
            "bot": "atlas",
            "parent_conversation_id": 1,
            "parent_run_kind": "conversation",
            "goal": f"goal number {n}",
            "status": ("done", "failed", "stopped", "running")[n % 4],
            "reason": "ran out" if n % 4 == 1 else None,
            "rounds": n,
            "input_tokens": 100 * n,
            "output_tokens": 10 * n,
            "created_at": f"2026-01-01T00:{n:02d}:00.000000+00:00",
            "ended_at": f"2026-01-01T01:{n:02d}:00.000000+00:00",
        }
        for n in range(40)
    ]
    return {
        "gate_decisions": gate,
        "pairing_codes": codes,
        "paired_users": paired,
        "delegations": delegations,
    }


async def _fill_sqlite(path: Path) -> None:
    store = HomeStore(path)
    try:
        for table, rows in _rows().items():
            for row in rows:
                await store.call(lambda db, t=table, r=row: insert_dict(db, t, r))
    finally:
        await store.close()


async def _fill_postgres(server: PgServer) -> None:
    async with server.pool.acquire() as conn:
        for table, rows in _rows().items():
            for row in rows:
                marks = ", ".join(f"${i}" for i in range(1, len(row) + 1))
                await conn.execute(
                    f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", *row.values()
                )


async def _bot_conversations(rig: Any) -> None:
    """The bot's own store (its file on both): chats with the people the names belong to."""
    store = await open_store_for_tests(rig.home.bot("atlas"))
    for chat in ("41", "42", "43", "99"):
        conversation = await store.conversation("telegram", chat, bot="atlas")
        await store.append(conversation.id, Message("user", f"hello from {chat}"))


_VARYING = (
    re.compile(r'name="csrf" value="[^"]+"'),  # each session's own
    re.compile(r'"X-CSRF-Token": "[^"]+"'),
    re.compile(r"\d{1,2}:\d{2}(:\d{2})?"),  # "now" on Home: seconds apart between the two
)


def _same_parts(html: str) -> str:
    for pattern in _VARYING:
        html = pattern.sub("…", html)
    return html


async def _render(home_path: Path, reads: Any) -> dict[str, str]:
    async with dashboard_rig(home_path, reads=reads) as rig:
        if reads is None:  # atlas.db's rows, in the home the rig made
            await _fill_sqlite(rig.home.db_path)
        await _bot_conversations(rig)
        await rig.log_in()
        pages = {}
        for page in PAGES:
            answer = await rig.client.get(page)
            assert answer.status == 200, page
            pages[page] = await answer.text()
        return pages


async def test_pages_render_the_same_from_postgresql_as_from_atlas_db(
    tmp_path: Path, postgres_url: str
) -> None:
    sqlite_home, pg_home = tmp_path / "sqlite", tmp_path / "pg"
    from_sqlite = await _render(sqlite_home, None)

    async with PgServer(postgres_url) as server:
        await _fill_postgres(server)
        from_pg = await _render(pg_home, PgDashboardReads(server))

    for page in PAGES:
        assert _same_parts(from_pg[page]) == _same_parts(from_sqlite[page]), page

    # And the pages show the rows (not two empty pages alike).
    trust = from_pg["/trust"]
    assert trust.count("make deploy") == 4 and "ls 6" in trust
    denied = from_pg["/trust?verdict=deny"]
    assert "ls 4" in denied and "make deploy" not in denied
    assert "make deploy" in from_pg["/trust?q=DEPLOY"] and "ls 2" not in from_pg["/trust?q=DEPLOY"]
    helper = from_pg["/trust?bot=helper&answered_by=guardian"]
    assert "make deploy" in helper and "ls 6" in helper and "ls 2" not in helper
    assert "ls 2" in from_pg["/trust?before=3"] and "ls 4" not in from_pg["/trust?before=3"]
    assert "1 pairing request(s)" in from_pg["/"]  # the expired one is not waiting
    names = from_pg["/conversations?bot=atlas"]
    assert "Paired Pat" in names and "Waiting Wanda" in names and "Late Larry" in names
    assert "Old Name" not in names and "Telegram 99" in names
    workbench = from_pg["/workbench"]
    assert "goal number 39" not in workbench  # still running: not ended
    assert "goal number 38" in workbench and "ran out" in workbench
    assert "goal number 1" in from_pg["/workbench?page=2"]


async def test_a_gate_filter_with_like_characters_matches_them_literally(
    tmp_path: Path, postgres_url: str
) -> None:
    from atlas.dashboard.queries import DecisionFilter

    await _fill_sqlite(tmp_path / "atlas.db")
    sqlite_reads = SqliteDashboardReads(HomeStore(tmp_path / "atlas.db"))
    async with PgServer(postgres_url) as server:
        await _fill_postgres(server)
        pg_reads = PgDashboardReads(server)
        for text in ("100%_", "0%_s", "%", "_"):
            where = DecisionFilter(text=text)
            from_pg = await pg_reads.gate_decisions(where, before_id=None, limit=50)
            from_sqlite = await sqlite_reads.gate_decisions(where, before_id=None, limit=50)
            assert [r["id"] for r in from_pg] == [r["id"] for r in from_sqlite], text
        [hit] = await pg_reads.gate_decisions(DecisionFilter(text="100%_"), before_id=None, limit=5)
        assert hit["reason"] == "100%_sure"
    await sqlite_reads.store.close()


# ---- the pages' own reads of conversations (atlas/dashboard/conversation_reads.py) -----------

CONVERSATION_PAGES = (
    "/",
    "/conversations?bot=atlas",
    "/conversations?bot=atlas&q=hello",
    "/conversations/atlas/1",
    "/conversations/atlas/1?before=4",
    "/conversations/atlas/1?after=2",
    "/conversations/atlas/1/messages/4",
    "/usage",
)


async def _talk(store: Any, bot: str = "atlas") -> None:
    """The same conversations on either engine: a chat with a tool call, its result and a long
    answer; the dashboard's own chat."""
    from atlas.providers.base import ToolCall, Usage

    chat = await store.conversation("telegram", "41", bot=bot)
    await store.append(chat.id, Message("user", "hello from 41"))
    call = ToolCall("call-1", "read_file", '{"path": "a.txt"}')
    await store.append(
        chat.id,
        Message("assistant", "", tool_calls=[call]),
        usage=Usage(10, 5, 2),
        model="fake/m",
    )
    await store.append(
        chat.id, Message("tool", "the file says hi", tool_call_id="call-1", name="read_file")
    )
    long = "It says hi. " + "more " * 1500
    await store.append(chat.id, Message("assistant", long), usage=Usage(20, 7), model="fake/m")
    web = await store.conversation("dashboard", "browser", bot=bot)
    await store.append(web.id, Message("user", "from the browser"))
    await store.append(web.id, Message("assistant", "answered in the browser"))


async def _render_conversations(home_path: Path, url: str | None) -> dict[str, str]:
    async def pages(rig: Any) -> dict[str, str]:
        await rig.log_in()
        found = {}
        for page in CONVERSATION_PAGES:
            answer = await rig.client.get(page)
            assert answer.status == 200, page
            found[page] = await answer.text()
        return found

    if url is None:
        async with dashboard_rig(home_path) as rig:
            await _talk(await open_store_for_tests(rig.home.bot("atlas")))
            return await pages(rig)
    from atlas.home import Home
    from atlas.store.pg.conversations import PgConversationStore

    async with PgServer(url) as server:

        async def open_pg(bot: Any) -> PgConversationStore:
            return PgConversationStore(server, bot.name)

        async with dashboard_rig(home_path, open_store=open_pg) as rig:
            with rig.home.config_path.open("a") as config:
                config.write(f'\n[store]\nurl = "{url}"\n')
            rig.dashboard.home = Home(rig.home.root)
            await _talk(await open_pg(rig.home.bot("atlas")))
            return await pages(rig)


async def test_conversation_pages_render_the_same_from_postgresql_as_from_the_bots_file(
    tmp_path: Path, postgres_url: str
) -> None:
    from_sqlite = await _render_conversations(tmp_path / "sqlite", None)
    from_pg = await _render_conversations(tmp_path / "pg", postgres_url)

    def same(html: str) -> str:  # the messages' times were stored a moment apart
        return re.sub(r"\.\d{6}", "", _same_parts(html))

    for page in CONVERSATION_PAGES:
        assert same(from_pg[page]) == same(from_sqlite[page]), page
    # And they show the rows (not two empty pages alike).
    assert "Telegram 41" in from_pg["/conversations?bot=atlas"]
    assert "<mark>hello</mark> from 41" in from_pg["/conversations?bot=atlas&q=hello"]
    view = from_pg["/conversations/atlas/1"]
    assert "the file says hi" in view and "read_file" in view and "It says hi." in view
    assert from_pg["/conversations/atlas/1/messages/4"].count("more") >= 1500
    assert "30 / 12" in from_pg["/usage"]  # tokens in / out of the day's two answers


async def test_the_chat_pages_earlier_turns_read_the_same_from_both(
    tmp_path: Path, postgres_url: str
) -> None:
    """The Chat page needs the daemon; its history read alone, on both engines."""
    from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT
    from atlas.dashboard.conversation_reads import conversation_reads
    from atlas.store.conversations import ConversationStore
    from atlas.store.pg.conversations import PgConversationStore

    async with ConversationStore(tmp_path / "conversations.db") as sqlite:
        assert await conversation_reads(sqlite).chat_history(WEB_CHANNEL, WEB_CHAT) == (None, [])
        await _talk(sqlite)
        from_sqlite = await conversation_reads(sqlite).chat_history(WEB_CHANNEL, WEB_CHAT)
    async with PgServer(postgres_url) as server:
        pg = PgConversationStore(server, "atlas")
        assert await conversation_reads(pg).chat_history(WEB_CHANNEL, WEB_CHAT) == (None, [])
        await _talk(pg)
        await _talk(PgConversationStore(server, "other"), "other")  # another bot's: not read
        from_pg = await conversation_reads(pg).chat_history(WEB_CHANNEL, WEB_CHAT)
    assert from_pg == from_sqlite
    texts = [item.text for item in from_pg[1]]
    assert texts == ["from the browser", "answered in the browser"], from_pg
