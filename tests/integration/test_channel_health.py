"""Supervised channel tasks (issue #19): a poller or Socket Mode client that dies is logged with
its traceback and restarted, health shows it, and a later message is answered. Real aiogram and
slack-bolt against the fakes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from atlas.channels.health_file import HealthWriter, health_path, read_health
from atlas.channels.manager import RunningChannels, start_channels, stop_channels
from atlas.channels.slack.channel import SlackChannel, create_channel
from atlas.channels.supervisor import Health
from atlas.channels.telegram.channel import TelegramChannel
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.helpers import make_home

OWNER = 1
ALICE = "UALICE"
DM = "D0001"

TELEGRAM_TOML = """
[channels.telegram]
token_env = "ATLAS_TEST_TELEGRAM_TOKEN"
api_base = "{base}"
allowed_users = [{owner}]
poll_timeout = 5
"""


async def telegram_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeTelegram
) -> Path:
    """A home whose main bot polls `fake` (started here), its token in the environment."""
    base = await fake.start()
    monkeypatch.setenv("ATLAS_TEST_TELEGRAM_TOKEN", TOKEN)
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + TELEGRAM_TOML.format(base=base, owner=OWNER))
    return root


def watch(health_owner: TelegramChannel | SlackChannel) -> list[Health]:
    """Every health change of the channel from now on."""
    seen: list[Health] = []
    health_owner.health.listen(lambda _name, health: seen.append(health))
    return seen


async def until(predicate: Callable[[], object], timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_a_poller_that_dies_is_logged_restarted_and_answers_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The fault: the first run of the poll loop raises what nothing in it expects (as
    # aiogram's ClientDecodeError once did); later runs are the real loop.
    original_poll = TelegramChannel._poll
    release = asyncio.Event()
    runs: list[int] = []

    async def dies_once(self: TelegramChannel) -> None:
        runs.append(1)
        if len(runs) == 1:
            await release.wait()
            raise RuntimeError("injected poller fault")
        await original_poll(self)

    monkeypatch.setattr(TelegramChannel, "_poll", dies_once)
    fake = FakeTelegram()
    root = await telegram_home(tmp_path, monkeypatch, fake)
    home = Home(root)
    model = ScriptedModel()
    runtime = Runtime(home, model=model, registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    running: RunningChannels = await start_channels(home, dispatcher, wait=5)
    channel = running["telegram:atlas"]
    assert isinstance(channel, TelegramChannel)
    writer = HealthWriter(health_path(root), lambda: running.health)
    try:
        assert channel.health.current.state == "up"
        assert channel.health.current.activity == "polling"
        changes = watch(channel)
        with caplog.at_level(logging.INFO, logger="atlas"):
            release.set()
            await until(lambda: any(h.state == "reconnecting" for h in changes))
            reconnecting = next(h for h in changes if h.state == "reconnecting")
            assert "RuntimeError: injected poller fault" in reconnecting.reason
            # Meanwhile the file `atlas doctor` reads says so too.
            recorded = read_health(health_path(root))
            assert recorded is not None
            assert recorded.channels["telegram:atlas"].state in ("reconnecting", "up")

            model.add(Reply("still listening"))
            await fake.push(fake.message("are you there?", user_id=OWNER))
            await fake.wait_for(lambda: fake.sent_texts(OWNER) == ["still listening"])
        failures = [r for r in caplog.records if "telegram:atlas polling failed" in r.message]
        assert len(failures) == 1
        assert failures[0].levelno == logging.ERROR
        assert failures[0].exc_info is not None, "the traceback is logged"
        assert "injected poller fault" in str(failures[0].exc_info[1])
        assert [h.state for h in changes] == ["reconnecting", "up"]
        assert channel.health.current.activity == "polling"
        assert len(runs) == 2

        # /status, in the chat, names each channel's health.
        await fake.push(fake.message("/status", user_id=OWNER))
        await fake.wait_for(lambda: len(fake.sent_texts(OWNER)) == 2)
        status = fake.sent_texts(OWNER)[1]
        assert "telegram:atlas: polling since " in status, status
    finally:
        await dispatcher.shutdown()
        with caplog.at_level(logging.WARNING, logger="atlas"):
            caplog.clear()
            await stop_channels(running)
            writer.close()
        await runtime.close()
        await fake.stop()
    assert not channel._poller.running
    assert [r.message for r in caplog.records] == [], "stopping is quiet"
    assert channel.health.current.state == "stopped"
    final = read_health(health_path(root))
    assert final is not None and not final.running
    assert final.channels["telegram:atlas"].state == "stopped"


async def test_a_failing_get_updates_shows_reconnecting_until_telegram_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTelegram()
    root = await telegram_home(tmp_path, monkeypatch, fake)
    home = Home(root)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    fake.fail_next("getUpdates", "500")  # the poll loop itself retries this one
    running = await start_channels(home, dispatcher, wait=5)
    channel = running["telegram:atlas"]
    assert isinstance(channel, TelegramChannel)
    changes = watch(channel)
    try:
        await until(lambda: [h.state for h in changes] == ["reconnecting"])
        # An update the bot ignores (a group message not addressed to it) ends the long poll.
        await fake.push(fake.message("among us", user_id=OWNER, chat_id=-5, chat_type="group"))
        await until(lambda: [h.state for h in changes] == ["reconnecting", "up"])
        assert "getUpdates failed" in changes[0].reason
        assert changes[1].activity == "polling"
    finally:
        await dispatcher.shutdown()
        await stop_channels(running)
        await runtime.close()
        await fake.stop()


@pytest.fixture
async def slack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackChannel]:
    fake = FakeSlack()
    await fake.start()
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(
        bot_toml.read_text()
        + f'\n[channels.slack]\nallowed_users = ["{ALICE}"]\napi_base = "{fake.api_url}"\n'
    )
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", fake.app_token)
    home = Home(root)
    model = ScriptedModel()
    runtime = Runtime(home, model=model, registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    channel = create_channel(home.bot("atlas"), dispatcher)
    channel.socket_check_seconds = 0.02
    dispatcher.channels[channel.name] = channel
    await channel.start()
    channel.fake = fake  # type: ignore[attr-defined]
    channel.model = model  # type: ignore[attr-defined]
    try:
        yield channel
    finally:
        await dispatcher.shutdown()
        await channel.stop()
        await runtime.close()
        await fake.close()


def dm(fake: FakeSlack, text: str) -> dict[str, object]:
    ts = fake.next_ts()
    return {
        "type": "message",
        "channel": DM,
        "channel_type": "im",
        "user": ALICE,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "client_msg_id": str(uuid.uuid4()),
    }


async def test_a_dead_socket_mode_client_is_replaced_and_events_flow_again(
    slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    fake: FakeSlack = slack.fake  # type: ignore[attr-defined]
    model: ScriptedModel = slack.model  # type: ignore[attr-defined]
    assert slack.health.current.describe().startswith("connected (Socket Mode) since ")
    changes = watch(slack)
    # The fault: slack_sdk's message processor task dies (it restarts none of its tasks):
    # events would arrive on the socket and never be handled.
    client = slack._handler.client
    with caplog.at_level(logging.INFO, logger="atlas"):
        client.message_processor.cancel()
        await until(lambda: fake.connections == 2)
        await fake.wait_connected()
        await until(lambda: slack.health.current.state == "up")
        model.add(Reply("back again"))
        await fake.push_event(dm(fake, "hello?"))
        await fake.wait_for(lambda: [p.text for p in fake.replies(DM)] == ["back again"])
    failures = [r for r in caplog.records if "slack:atlas Socket Mode failed" in r.message]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert "message_processor was cancelled" in str(failures[0].exc_info[1])
    assert [h.state for h in changes][:1] == ["reconnecting"]
    assert changes[-1].state == "up"
    assert client.closed, "the dead client was closed, not left behind"

    # !status (answered by the dispatcher) lists the channel's health.
    await fake.push_event(dm(fake, "!status"))
    await fake.wait_for(lambda: len(fake.replies(DM)) == 2)
    assert "slack:atlas: connected (Socket Mode) since " in fake.replies(DM)[1].text


async def test_the_daemon_records_channel_health_for_doctor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.channels.health_file import channel_health_checks
    from atlas.daemon import serve

    fake = FakeTelegram()
    root = await telegram_home(tmp_path, monkeypatch, fake)
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(Home(root), stop=stop))
    try:
        await until(lambda: health_path(root).exists())
        [(name, ok, detail, _)] = channel_health_checks(root)
        assert (name, ok) == ("channel telegram:atlas", True)
        assert detail.startswith("polling since ")
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 20)
        await fake.stop()
    [(name, ok, detail, _)] = channel_health_checks(root)
    assert name == "channels" and detail.startswith("daemon not running (it stopped at ")


async def test_an_html_502_at_start_is_logged_in_one_line_and_the_start_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The nginx in front of the Bot API answers getMe with its HTML page: aiogram raises
    ClientDecodeError (not a TelegramAPIError). The start fails with the page's title, not a
    traceback, and the next attempt connects."""
    fake = FakeTelegram()
    root = await telegram_home(tmp_path, monkeypatch, fake)
    home = Home(root)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    fake.fail_next("getMe", "html502")
    caplog.set_level(logging.WARNING, logger="atlas.channels.manager")
    running = await start_channels(home, dispatcher, wait=5, first_delay=0.05)
    channel = running["telegram:atlas"]
    assert isinstance(channel, TelegramChannel)
    try:
        await until(lambda: channel.health.current.state == "up")
        failures = [r for r in caplog.records if "failed to start" in r.getMessage()]
        assert len(failures) == 1, [r.getMessage() for r in caplog.records]
        assert failures[0].exc_info is None  # one line, no traceback
        assert "HTML page" in failures[0].getMessage()
        assert fake.calls_to("getMe"), "the second attempt asked getMe again"
    finally:
        await dispatcher.shutdown()
        await stop_channels(running)
        await runtime.close()
        await fake.stop()
