"""The dashboard's pages over a home with stored conversations: Home, Conversations (list,
read, search), Trust (the log, modes changed), Usage, and the live event stream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.channels.supervisor import ChannelHealth
from atlas.config import load_bot_settings
from atlas.providers.base import Message, ToolCall
from atlas.tools.registry import ConversationState
from tests.dashboard_rig import (
    Rig,
    dashboard_rig,
    store_conversation,
)
from tests.helpers import open_store_for_tests


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


async def test_the_mode_change_persists_in_bot_toml_goes_live_and_is_recorded(rig: Rig) -> None:
    csrf = await rig.log_in()
    toml = rig.home.bot("atlas").root / "bot.toml"
    comment = "# A bot: its title"
    assert comment in toml.read_text()
    answer = await rig.client.post(
        "/trust/mode", data={"bot": "atlas", "mode": "auto", "csrf": csrf}, allow_redirects=False
    )
    assert answer.status == 303
    assert load_bot_settings(toml).mode == "auto"
    assert comment in toml.read_text()  # edited in place
    assert rig.home.bot("atlas").settings.mode == "auto"  # the live home: the next turn's mode
    assert rig.home.main_bot.settings.mode == "auto"
    decisions = await rig.audit.recent_decisions()
    assert decisions[0]["tool"] == "mode" and decisions[0]["answered_by"] == "user"
    assert decisions[0]["summary"] == "mode ask -> auto"
    trust = await (await rig.client.get("/trust")).text()
    assert "mode ask -&gt; auto" in trust
    bad = await rig.client.post("/trust/mode", data={"bot": "atlas", "mode": "yolo", "csrf": csrf})
    assert bad.status == 400


async def test_home_shows_bots_health_today_routines_and_what_waits(rig: Rig) -> None:
    from atlas.routines.store import RoutineStore

    await store_conversation(rig.home)
    await RoutineStore(rig.audit).create("atlas", "standup", "Say hi", "every day at 09:00", None)
    health = ChannelHealth("telegram:atlas")
    health.up("polling")
    rig.health["telegram:atlas"] = health
    state = ConversationState()
    state.pending_asks.append("run_command wants to run `make deploy`. Allow?")
    rig.states[("atlas", 1)] = state
    await rig.log_in()
    html = await (await rig.client.get("/")).text()
    assert "telegram:atlas: polling since" in html
    assert "Waiting for you: 1" in html and "make deploy" in html
    assert "standup" in html
    assert "2,500 / 70" in html  # today's tokens in / out
    live = await rig.client.get("/live", headers={"HX-Request": "true"})
    assert live.status == 200 and 'id="live"' in await live.text()


async def test_conversations_list_read_and_search(rig: Rig) -> None:
    conversation = await store_conversation(rig.home)
    await rig.log_in()
    listing = await (await rig.client.get("/conversations?bot=atlas")).text()
    assert f"/conversations/atlas/{conversation}" in listing and "Plans" in listing
    read = await (await rig.client.get(f"/conversations/atlas/{conversation}")).text()
    assert "<details" in read and "read_file" in read
    assert "Q3: the zeppelin fleet grew by two." in read  # the result, inside the call's details
    assert read.index("read_file") < read.index("Q3: the zeppelin") < read.index("It is in")
    found = await (await rig.client.get("/conversations?q=zeppelins")).text()  # stemmed
    assert f"/conversations/atlas/{conversation}?" in found
    assert "<mark>" in found
    none = await (await rig.client.get("/conversations?q=submarine")).text()
    assert "Nothing found" in none
    store = await open_store_for_tests(rig.home.bot("atlas"))
    other = await store.conversation("console", "jp", bot="atlas", title="Tokyo")
    await store.append(other.id, Message("user", "明日は東京タワーで会議があります"))
    cjk = await (await rig.client.get("/conversations?q=東京タワー&bot=atlas")).text()
    assert f"/conversations/atlas/{other.id}?" in cjk and "<mark>東京タワー</mark>" in cjk


async def test_stored_text_is_escaped(rig: Rig) -> None:
    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("console", "x", bot="atlas", title="<b>t</b>")
    await store.append(conversation.id, Message("user", "<script>alert(1)</script> zebra"))
    await rig.log_in()
    read = await (await rig.client.get(f"/conversations/atlas/{conversation.id}")).text()
    assert "<script>alert(1)</script>" not in read and "&lt;script&gt;" in read
    found = await (await rig.client.get("/conversations?q=zebra")).text()
    assert "<script>alert" not in found


async def test_a_long_conversation_is_paged_without_splitting_a_call_from_its_result(
    rig: Rig,
) -> None:
    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("console", "long", bot="atlas")
    for n in range(70):
        await store.append(conversation.id, Message("user", f"message {n}"))
    call = ToolCall("call-9", "find_files", "{}")
    await store.append(conversation.id, Message("assistant", "", tool_calls=[call]))  # the 71st
    await store.append(conversation.id, Message("tool", "found nothing", tool_call_id="call-9"))
    await rig.log_in()
    first = await (await rig.client.get(f"/conversations/atlas/{conversation.id}?after=0")).text()
    assert "message 59" in first and "message 60" not in first
    after = re.search(r"\?after=(\d+)\" rel=\"next\"", first).group(1)  # type: ignore[union-attr]
    second = await rig.client.get(f"/conversations/atlas/{conversation.id}?after={after}")
    text = await second.text()
    assert "message 60" in text and "find_files" in text and "found nothing" in text
    assert 'rel="next"' not in text


async def test_trust_and_usage_pages_render(rig: Rig) -> None:
    from atlas.store.home_db import GateRecord

    await store_conversation(rig.home)
    await rig.audit.record_decision(
        GateRecord(
            "atlas",
            1,
            "conversation",
            "run_command",
            "d",
            "rm -rf build",
            "deny",
            "hardline",
            "never",
            "rule",
        )
    )
    await rig.log_in()
    trust = await (await rig.client.get("/trust?verdict=deny")).text()
    assert "rm -rf build" in trust and 'name="mode"' in trust
    filtered = await (await rig.client.get("/trust?verdict=allow")).text()
    assert "rm -rf build" not in filtered
    usage = await (await rig.client.get("/usage?days=7")).text()
    assert "<svg" in usage and "2,500" in usage


def test_cost_counts_cached_input_at_its_own_price_and_unpriced_models_as_unknown() -> None:
    from atlas.dashboard.pages.usage import DayUsage, _day_cost, cost_of
    from atlas.dashboard.queries import UsageRow

    prices = {"fake/test-model": [1.0, 2.0, 0.5]}
    row = UsageRow("2026-12-04T09", "fake/test-model", 2_000_000, 100_000, 1_000_000)
    assert cost_of(row, prices) == pytest.approx(1.0 + 0.5 + 0.2)
    assert cost_of(row, {"fake/test-model": [1.0, 2.0]}) == pytest.approx(2.0 + 0.2)
    assert cost_of(UsageRow("h", "other/model", 10, 10, 0), prices) is None
    assert _day_cost([DayUsage(cost=1.5), None, DayUsage(cost=0.5)]) == 2.0
    assert _day_cost([DayUsage(cost=1.5), DayUsage(priced=False)]) is None


async def test_events_tell_home_when_a_channel_changes_and_end_when_the_dashboard_stops(
    rig: Rig,
) -> None:
    import asyncio

    dashboard = rig.dashboard
    assert dashboard is not None
    health = rig.health["telegram:atlas"] = ChannelHealth("telegram:atlas")
    dashboard.watch_channels()
    sse = {"Accept": "text/event-stream"}  # as EventSource asks
    assert (await rig.client.get("/events", headers=sse)).status == 401  # no session, no stream
    await rig.log_in()
    stream = await rig.client.get("/events", headers=sse)
    assert stream.headers["Content-Type"] == "text/event-stream"
    assert await stream.content.readline() == b"retry: 5000\n"
    await stream.content.readline()
    await asyncio.sleep(0)  # the handler subscribes
    health.reconnecting("ConnectionError: refused")
    line = await asyncio.wait_for(stream.content.readline(), 5)
    assert line == b"event: home\n"
    dashboard.events.close()
    rest = await asyncio.wait_for(stream.content.read(), 5)  # the stream ends
    assert rest == b"data: home\n\n"
    assert dashboard.events.streams == 0


async def test_a_conversation_mode_set_with_slash_mode_is_shown_and_changed_here(rig: Rig) -> None:
    state = ConversationState(mode="auto")
    rig.states[("atlas", 7)] = state
    csrf = await rig.log_in()
    trust = await (await rig.client.get("/trust")).text()
    assert 'name="conversation" value="7"' in trust
    data = {"bot": "atlas", "conversation": "7", "mode": "read-only"}
    assert (await rig.client.post("/trust/conversation-mode", data=data)).status == 403
    answer = await rig.client.post(
        "/trust/conversation-mode", data={**data, "csrf": csrf}, allow_redirects=False
    )
    assert answer.status == 303 and state.mode == "read-only"
    cleared = {**data, "mode": "", "csrf": csrf}
    await rig.client.post("/trust/conversation-mode", data=cleared, allow_redirects=False)
    assert state.mode is None  # the bot's mode again
    [latest, before] = (await rig.audit.recent_decisions())[:2]
    assert latest["summary"] == "conversation mode read-only -> the bot's"
    assert before["summary"] == "conversation mode auto -> read-only"
    unknown = {**data, "conversation": "99", "csrf": csrf}
    assert (await rig.client.post("/trust/conversation-mode", data=unknown)).status == 400


async def test_usage_keeps_the_hours_that_are_over_and_reads_the_current_one_again(
    rig: Rig,
) -> None:
    from datetime import UTC, datetime, timedelta

    from atlas.dashboard.usage_cache import UsageCache

    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("console", "u", bot="atlas")
    now = datetime.now(UTC)

    def put(db, at: datetime, tokens: int) -> None:  # type: ignore[no-untyped-def]
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, usage, model, kind, "
            "created_at) VALUES (?, 'assistant', 'x', ?, 'fake/test-model', 'message', ?)",
            [conversation.id, f'{{"input_tokens": {tokens}, "output_tokens": 1}}', at.isoformat()],
        )

    await store.db.call(lambda db: put(db, now - timedelta(hours=3), 100))
    await store.db.call(lambda db: put(db, now, 10))
    cache = UsageCache()
    first = await cache.rows("atlas", store, now - timedelta(days=1), now)
    assert sorted(r.input_tokens for r in first) == [10, 100]
    # The past hour is kept: gone from the file, still counted; the current hour is read anew.
    await store.db.call(lambda db: db.execute("DELETE FROM messages WHERE content = 'x'"))
    await store.db.call(lambda db: put(db, now, 7))
    again = await cache.rows("atlas", store, now - timedelta(days=1), now)
    assert sorted(r.input_tokens for r in again) == [7, 100]
    # A span reaching further back than what is kept is read whole.
    wider = await cache.rows("atlas", store, now - timedelta(days=2), now)
    assert sorted(r.input_tokens for r in wider) == [7]
