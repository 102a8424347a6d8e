"""The dashboard through aiohttp's test client: the login gate, one-time links, CSRF, the mode
change, and every page rendered over a home with stored conversations."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from atlas.channels.supervisor import ChannelHealth
from atlas.config import load_bot_settings
from atlas.dashboard.app import CSP, build_app
from atlas.dashboard.auth import Signer, issue_login_token, read_secret, secret_path
from atlas.dashboard.context import Dashboard
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.providers.base import Message, ToolCall, Usage
from atlas.store.home_db import HomeStore
from atlas.tools.registry import ConversationState
from tests.helpers import close_test_stores, make_home, open_store_for_tests

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def store_conversation(home: Home, bot: str = "atlas") -> int:
    """A conversation with a question, a tool call and its result, and an answer."""
    store = await open_store_for_tests(home.bot(bot))
    conversation = await store.conversation("console", "c1", bot=bot, title="Plans")
    await store.append(conversation.id, Message("user", "Where is the quarterly zeppelin report?"))
    call = ToolCall("call-1", "read_file", '{"path": "reports/q3.md"}')
    await store.append(
        conversation.id,
        Message("assistant", "", tool_calls=[call]),
        usage=Usage(input_tokens=1200, output_tokens=30),
        model="fake/test-model",
    )
    await store.append(
        conversation.id,
        Message("tool", "Q3: the zeppelin fleet grew by two.", tool_call_id="call-1"),
    )
    await store.append(
        conversation.id,
        Message("assistant", "It is in reports/q3.md: the fleet grew by two."),
        usage=Usage(input_tokens=1300, output_tokens=40),
        model="fake/test-model",
    )
    return conversation.id


class Rig:
    def __init__(self, home: Home, client: TestClient, audit: HomeStore) -> None:
        self.home, self.client, self.audit = home, client, audit
        self.states: dict[tuple[str, int], ConversationState] = {}
        self.health: dict[str, ChannelHealth] = {}
        self.dashboard: Dashboard | None = None

    async def log_in(self) -> str:
        """Log in through a fresh link; the CSRF token of the session."""
        token = issue_login_token(self.home.root)
        answer = await self.client.post("/login", data={"token": token}, allow_redirects=False)
        assert answer.status == 303
        page = await self.client.get("/")
        return CSRF.search(await page.text()).group(1)  # type: ignore[union-attr]


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    home = make_home(home_path)
    audit = HomeStore(home.db_path)
    signer = Signer.for_home(home.root)
    holder: dict[str, Rig] = {}
    dashboard = Dashboard(
        home,
        open_store_for_tests,
        audit,
        signer,
        channel_health=lambda: holder["rig"].health,
        conversation_states=lambda: holder["rig"].states,
    )
    client = TestClient(TestServer(build_app(dashboard), host="127.0.0.1"))
    await client.start_server()
    holder["rig"] = Rig(home, client, audit)
    holder["rig"].dashboard = dashboard
    yield holder["rig"]
    await client.close()
    await audit.close()
    await close_test_stores()


# ---- the login gate ---------------------------------------------------------------------------


async def test_pages_redirect_to_login_and_other_requests_get_401_without_a_session(
    rig: Rig,
) -> None:
    page = await rig.client.get("/conversations", allow_redirects=False)
    assert page.status == 303 and page.headers["Location"] == "/login"
    live = await rig.client.get("/live", headers={"HX-Request": "true"})
    assert live.status == 401
    post = await rig.client.post("/trust/mode", data={"bot": "atlas", "mode": "auto"})
    assert post.status == 401
    forged = await rig.client.get(
        "/", cookies={"atlas_session": "abc.123.forged"}, allow_redirects=False
    )
    assert forged.status == 303
    assert load_bot_settings(rig.home.bot("atlas").root / "bot.toml").mode == "ask"


async def test_a_login_link_works_once(rig: Rig) -> None:
    token = issue_login_token(rig.home.root)
    shown = await rig.client.get(f"/login?token={token}")  # a previewer fetching it spends nothing
    assert shown.status == 200 and token in await shown.text()
    first = await rig.client.post("/login", data={"token": token}, allow_redirects=False)
    assert first.status == 303
    cookie = first.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert (await rig.client.get("/")).status == 200
    rig.client.session.cookie_jar.clear()
    again = await rig.client.post("/login", data={"token": token}, allow_redirects=False)
    assert again.status == 403
    assert (await rig.client.get("/", allow_redirects=False)).status == 303


async def test_an_expired_link_is_refused(rig: Rig) -> None:
    token = issue_login_token(rig.home.root, now=time.time() - 11 * 60)
    answer = await rig.client.post("/login", data={"token": token}, allow_redirects=False)
    assert answer.status == 403


async def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(rig: Rig) -> None:
    csrf = await rig.log_in()
    for data in ({"bot": "atlas", "mode": "auto"}, {"bot": "atlas", "mode": "auto", "csrf": "x"}):
        answer = await rig.client.post("/trust/mode", data=data, allow_redirects=False)
        assert answer.status == 403
    assert load_bot_settings(rig.home.bot("atlas").root / "bot.toml").mode == "ask"
    # Another session's token does not pass either.
    other = Signer(read_secret(rig.home.root)).csrf_token(
        Signer(read_secret(rig.home.root)).new_session()[0]
    )
    assert other != csrf
    answer = await rig.client.post(
        "/trust/mode", data={"bot": "atlas", "mode": "auto", "csrf": other}
    )
    assert answer.status == 403


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


async def test_responses_carry_the_csp_and_a_foreign_host_is_refused(rig: Rig) -> None:
    page = await rig.client.get("/login")
    assert page.headers["Content-Security-Policy"] == CSP
    assert page.headers["X-Frame-Options"] == "DENY"
    rebound = await rig.client.get("/login", headers={"Host": "evil.example:8765"})
    assert rebound.status == 421


def test_the_secret_is_private_and_made_once(home_path: Path) -> None:
    home = make_home(home_path)
    first = read_secret(home.root)
    assert secret_path(home.root).stat().st_mode & 0o777 == 0o600
    assert read_secret(home.root) == first
    assert first.decode() not in (home.root / "config.toml").read_text()


def test_listening_beyond_loopback_needs_allow_remote(home_path: Path) -> None:
    from atlas.config import DashboardSettings
    from atlas.dashboard.server import listen_of

    with pytest.raises(ConfigError, match="allow_remote"):
        listen_of(DashboardSettings(listen="0.0.0.0:8765"))
    remote = listen_of(DashboardSettings(listen="0.0.0.0:8765", allow_remote=True))
    assert remote.remote and remote.url == "http://127.0.0.1:8765"
    assert not listen_of(DashboardSettings(listen="[::1]:9000")).remote


# ---- pages ------------------------------------------------------------------------------------


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
    first = await (await rig.client.get(f"/conversations/atlas/{conversation.id}")).text()
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


async def test_init_makes_the_secret_and_atlas_dashboard_prints_a_link_that_logs_in(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.cli import main

    fresh = rig.home.root.parent / "fresh"
    assert main(["init", "--home", str(fresh)]) == 0
    assert secret_path(fresh).stat().st_mode & 0o777 == 0o600
    assert read_secret(fresh).decode() not in (fresh / "config.toml").read_text()
    capsys.readouterr()
    assert main(["dashboard", "--home", str(rig.home.root)]) == 0
    printed = capsys.readouterr().out
    assert "the daemon is not running" in printed
    token = re.search(r"/login\?token=(\S+)", printed).group(1)  # type: ignore[union-attr]
    answer = await rig.client.post("/login", data={"token": token}, allow_redirects=False)
    assert answer.status == 303


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


async def test_secret_values_quoted_in_a_conversation_are_masked(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "123456789:AAH-not-a-real-telegram-token"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", token)  # a variable the config names as a secret
    key = read_secret(rig.home.root).decode()
    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("console", "s", bot="atlas")
    await store.append(conversation.id, Message("tool", f"TOKEN={token}\nkey {key} zebra"))
    await rig.log_in()
    read = await (await rig.client.get(f"/conversations/atlas/{conversation.id}")).text()
    assert token not in read and key not in read and read.count("[secret]") == 2
    found = await (await rig.client.get("/conversations?q=zebra")).text()
    assert key not in found


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


async def test_a_post_from_another_site_is_refused_even_with_the_token(rig: Rig) -> None:
    csrf = await rig.log_in()
    foreign = {"Origin": "http://evil.example"}
    data = {"bot": "atlas", "mode": "auto", "csrf": csrf}
    answer = await rig.client.post("/trust/mode", data=data, headers=foreign)
    assert answer.status == 403
    token = issue_login_token(rig.home.root)
    login = await rig.client.post("/login", data={"token": token}, headers=foreign)
    assert login.status == 403
    assert load_bot_settings(rig.home.bot("atlas").root / "bot.toml").mode == "ask"
    own = {"Origin": f"http://{rig.client.host}:{rig.client.port}"}
    answer = await rig.client.post("/trust/mode", data=data, headers=own, allow_redirects=False)
    assert answer.status == 303
    home = await (await rig.client.get("/")).text()
    assert f'hx-headers=\'{{"X-CSRF-Token": "{csrf}"}}\'' in home  # htmx requests carry it


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


async def test_log_out_everyone_ends_every_session_and_unused_link(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.cli import main

    await rig.log_in()
    waiting = issue_login_token(rig.home.root)
    assert (await rig.client.get("/", allow_redirects=False)).status == 200
    assert main(["dashboard", "--log-out-everyone", "--home", str(rig.home.root)]) == 0
    printed = capsys.readouterr().out
    assert "Every dashboard session has ended" in printed
    assert (await rig.client.get("/", allow_redirects=False)).status == 303  # the old cookie
    stale = await rig.client.post("/login", data={"token": waiting}, allow_redirects=False)
    assert stale.status == 403
    token = re.search(r"/login\?token=(\S+)", printed).group(1)  # type: ignore[union-attr]
    fresh = await rig.client.post("/login", data={"token": token}, allow_redirects=False)
    assert fresh.status == 303
    assert (await rig.client.get("/", allow_redirects=False)).status == 200


def test_doctor_warns_when_the_dashboard_is_reachable_from_other_machines(home_path: Path) -> None:
    from atlas.dashboard.server import doctor_lines
    from tests.helpers import BASE_CONFIG

    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        'listen = "127.0.0.1:0"', 'listen = "0.0.0.0:8765"\nallow_remote = true'
    )
    [(name, ok, detail, fix, optional)] = doctor_lines(make_home(home_path, config=config))
    assert (name, ok, optional) == ("dashboard", False, True)  # a warning, not a failure
    assert "reachable from other machines" in detail and "TLS" in fix


async def test_serving_beyond_loopback_says_so_in_the_log(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    from atlas.dashboard.server import DashboardServer, Listen, running_url

    assert rig.dashboard is not None
    # Bound to loopback all the same: the test only needs the start to take the remote path.
    server = DashboardServer(rig.dashboard, Listen("127.0.0.1", 0, remote=True))
    with caplog.at_level("INFO", logger="atlas.dashboard.server"):
        await server.start()
    try:
        assert "reachable from other machines" in caplog.text
        assert running_url(rig.home.root) == server.listen.url
    finally:
        await server.stop()
    assert running_url(rig.home.root) is None
