"""The dashboard's safety: login links, sessions, CSRF and Origin, the secret and its mask,
where it listens and what the log and atlas doctor say of it."""

from __future__ import annotations

import multiprocessing
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from atlas.config import load_bot_settings
from atlas.dashboard.app import CSP
from atlas.dashboard.auth import Signer, issue_login_token, read_secret, secret_path
from atlas.errors import AtlasError, ConfigError
from atlas.providers.base import Message
from tests.dashboard_rig import (
    Rig,
    dashboard_rig,
)
from tests.helpers import make_home, open_store_for_tests


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


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
    from atlas.dashboard.listen import listen_of

    with pytest.raises(ConfigError, match="allow_remote"):
        listen_of(DashboardSettings(listen="0.0.0.0:8765"))
    remote = listen_of(DashboardSettings(listen="0.0.0.0:8765", allow_remote=True))
    assert remote.remote and remote.url == "http://127.0.0.1:8765"
    assert not listen_of(DashboardSettings(listen="[::1]:9000")).remote


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
    from atlas.dashboard.listen import Listen
    from atlas.dashboard.server import DashboardServer, running_url

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


def _read_after(barrier: Any, root: str, out: Any) -> None:
    barrier.wait()
    try:
        out.put(read_secret(Path(root)))
    except AtlasError as exc:
        out.put(str(exc))


def test_processes_making_the_secret_at_once_all_read_the_same_whole_one(tmp_path: Path) -> None:
    """Nodes starting together on one home folder: none may read the file half written."""
    context = multiprocessing.get_context("fork")
    for round_ in range(6):
        root = tmp_path / str(round_)
        root.mkdir()
        barrier, out = context.Barrier(6), context.Queue()
        workers = [
            context.Process(target=_read_after, args=(barrier, str(root), out)) for _ in range(6)
        ]
        for worker in workers:
            worker.start()
        seen = {out.get(timeout=20) for _ in workers}
        for worker in workers:
            worker.join(timeout=20)
        assert len(seen) == 1 and isinstance(next(iter(seen)), bytes), seen
        assert [p.name for p in root.iterdir()] == ["dashboard.key"]  # no draft left
