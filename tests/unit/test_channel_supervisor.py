"""The channel supervisor, channel health, its run file and what `atlas doctor` says of it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from atlas import doctor
from atlas.channels import manager
from atlas.channels.chat_common import BackgroundTasks
from atlas.channels.health_file import (
    HealthWriter,
    channel_health_checks,
    health_path,
    read_health,
)
from atlas.channels.supervisor import ChannelHealth, Health, Supervisor, health_lines
from atlas.dispatch import Dispatcher
from atlas.errors import ConfigError
from atlas.home import Bot, Home
from atlas.providers.scripted import ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry


async def until(predicate: Callable[[], object], timeout: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


async def test_work_that_fails_or_ends_is_logged_and_restarted_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = ChannelHealth("telegram:atlas")
    runs: list[float] = []
    forever = asyncio.Event()

    async def work() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) == 1:
            raise ValueError("first run breaks")
        if len(runs) == 2:
            return  # ends although it should run until stopped
        health.up("polling")
        await forever.wait()

    supervisor = Supervisor("telegram:atlas polling", work, health, first_delay=0.05, max_delay=1)
    with caplog.at_level(logging.INFO, logger="atlas"):
        supervisor.start()
        await until(lambda: health.current.state == "up")
    failed, ended = [r for r in caplog.records if r.name == "atlas.channels.supervisor"]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert "telegram:atlas polling failed; restarting in 0.05 s" in failed.message
    assert "ended unexpectedly; restarting in 0.1 s" in ended.message  # the wait doubled
    assert runs[2] - runs[1] >= 0.09
    assert supervisor.restarts == 2
    await supervisor.stop()
    assert not supervisor.running


async def test_stop_cancels_the_work_and_waits_for_it() -> None:
    health = ChannelHealth("slack:atlas")
    cleaned = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    supervisor = Supervisor("slack:atlas Socket Mode", work, health, first_delay=0, max_delay=0)
    supervisor.start()
    await asyncio.sleep(0)
    await supervisor.stop()
    assert cleaned.is_set() and not supervisor.running
    assert health.current.state == "starting", "a stop is not a failure"


def test_health_keeps_when_trouble_began_and_survives_a_bad_listener() -> None:
    health = ChannelHealth("telegram:atlas")
    heard: list[Health] = []

    def broken(_name: str, _health: Health) -> None:
        raise OSError("disk full")

    health.listen(broken)
    health.listen(lambda _name, h: heard.append(h))
    health.reconnecting("getUpdates failed: 502")
    began = health.current.since
    health.reconnecting("getUpdates failed: 503")
    health.reconnecting("getUpdates failed: 503")  # no change: nobody hears it
    assert [h.reason for h in heard] == ["getUpdates failed: 502", "getUpdates failed: 503"]
    assert health.current.since == began
    assert health.current.describe().startswith("reconnecting since ")
    assert health.current.describe().endswith("(getUpdates failed: 503)")
    health.up("polling")
    assert health.current.describe().startswith("polling since ")


def test_status_lines_name_only_the_bots_channels() -> None:
    class WithHealth:
        def __init__(self, name: str) -> None:
            self.health = ChannelHealth(name)

    channels = {
        "telegram:atlas": WithHealth("telegram:atlas"),
        "slack:other": WithHealth("slack:other"),
        "console": object(),
    }
    channels["telegram:atlas"].health.stopped("could not start: bad token")  # type: ignore[attr-defined]
    [line] = health_lines(channels, "atlas")
    assert line.startswith("telegram:atlas: stopped at ")
    assert line.endswith(": could not start: bad token")


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_doctor_reads_each_channels_health_from_the_run_file(tmp_path: Path) -> None:
    assert channel_health_checks(tmp_path) == [
        ("channels", True, "daemon not running (it has not run with this home)", "")
    ]
    polling, slack = ChannelHealth("telegram:atlas"), ChannelHealth("slack:atlas")
    healths = {"telegram:atlas": polling, "slack:atlas": slack}
    writer = HealthWriter(health_path(tmp_path), lambda: healths)
    polling.up("polling")
    slack.reconnecting("the Socket Mode connection is down")
    checks = {name: (ok, detail, fix) for name, ok, detail, fix in channel_health_checks(tmp_path)}
    ok, detail, _ = checks["channel telegram:atlas"]
    assert ok and detail.startswith("polling since ")
    ok, detail, fix = checks["channel slack:atlas"]
    assert not ok and detail.startswith("reconnecting since ") and "traceback" in fix

    writer.close()  # the daemon stopped cleanly
    [(name, ok, detail, _)] = channel_health_checks(tmp_path)
    assert (name, ok) == ("channels", True) and detail.startswith("daemon not running (it stopped")


def test_a_dead_daemons_record_says_not_running_and_a_torn_one_unknown(tmp_path: Path) -> None:
    path = health_path(tmp_path)
    only = {"telegram:atlas": ChannelHealth("telegram:atlas")}
    HealthWriter(path, lambda: only)
    record = json.loads(path.read_text())
    assert record["pid"] == os.getpid() and record["running"] is True
    record["pid"] = dead_pid()  # a daemon that was killed: it never wrote "running": false
    path.write_text(json.dumps(record))
    [(_, ok, detail, _)] = channel_health_checks(tmp_path)
    assert ok and detail.startswith(f"daemon not running (pid {record['pid']} is gone")

    path.write_text(json.dumps(record)[:40])  # torn
    assert read_health(path) is None
    [(_, ok, detail, _)] = channel_health_checks(tmp_path)
    assert ok and detail == f"health unknown: {path} could not be read"


def test_each_node_records_its_own_channels_and_one_on_another_host_is_named(
    tmp_path: Path,
) -> None:
    """Nodes of one home folder write run/nodes/<name>/channels.json each; a node's channels
    come with its leases (`refresh`); a record from another machine is shown as it last said,
    naming its host, since its pid means nothing here."""
    n1: dict[str, ChannelHealth] = {}
    writer = HealthWriter(health_path(tmp_path, "n1"), lambda: n1)
    [(name, ok, detail, _)] = channel_health_checks(tmp_path)
    assert (name, ok) == ("node n1: channels", True)
    assert detail == f"node n1 running (pid {os.getpid()}), no chat channels"
    n1["telegram:a"] = gained = ChannelHealth("telegram:a")  # a bot's lease gained
    writer.refresh()
    gained.up("polling")  # heard: the file follows the new channel's changes
    other = ChannelHealth("telegram:b")
    HealthWriter(health_path(tmp_path, "n2"), lambda: {"telegram:b": other})
    path = health_path(tmp_path, "n2")
    record = json.loads(path.read_text())
    record["host"], record["pid"] = "elsewhere.example", dead_pid()
    path.write_text(json.dumps(record))
    checks = {name: (ok, detail) for name, ok, detail, _ in channel_health_checks(tmp_path)}
    assert checks["node n1: channel telegram:a"][1].startswith("polling since ")
    ok, detail = checks["node n2: channel telegram:b"]
    assert f"pid {record['pid']} on host elsewhere.example" in detail
    assert not (tmp_path / "run" / "channels.json").exists()  # the plain daemon's is apart


def test_atlas_dashboard_finds_a_nodes_address_on_this_machine(tmp_path: Path) -> None:
    from atlas.dashboard.server import running_url, url_path, write_url

    assert running_url(tmp_path) is None
    write_url(tmp_path, "http://127.0.0.1:9001", "n2")
    write_url(tmp_path, "http://127.0.0.1:9000", "n1")
    assert url_path(tmp_path, "n1").parent == tmp_path / "run" / "nodes" / "n1"
    assert running_url(tmp_path) == "http://127.0.0.1:9000"  # the first node by name
    record = json.loads(url_path(tmp_path, "n1").read_text())
    url_path(tmp_path, "n1").write_text(json.dumps(record | {"pid": dead_pid()}))
    assert running_url(tmp_path) == "http://127.0.0.1:9001"
    record = json.loads(url_path(tmp_path, "n2").read_text())
    url_path(tmp_path, "n2").write_text(json.dumps(record | {"host": "elsewhere.example"}))
    assert running_url(tmp_path) is None  # a dashboard on another machine: no link to it here
    write_url(tmp_path, "http://127.0.0.1:8080")
    assert running_url(tmp_path) == "http://127.0.0.1:8080"  # the plain daemon's first


async def test_atlas_doctor_shows_the_channels(
    home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.doctor import Check

    monkeypatch.setattr(doctor, "_sandbox_check", lambda home: Check("sandbox", True, "stub"))
    stopped = ChannelHealth("telegram:atlas")
    HealthWriter(health_path(home.root), lambda: {"telegram:atlas": stopped})
    stopped.stopped("could not start: the token is not a Telegram token")
    await doctor.doctor(home.root, offline=True)
    out = capsys.readouterr().out
    assert "[FAIL] channel telegram:atlas: stopped at " in out
    assert ": could not start: the token is not a Telegram token" in out
    assert "fix: fix what the reason says, then restart `atlas run`" in out


class StartsBadly:
    streams = False

    def __init__(self, name: str, error: Exception, failures: int) -> None:
        self.name = name
        self.error = error
        self.failures = failures
        self.attempts = 0

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error

    async def stop(self) -> None:
        pass


async def test_manager_health_a_failing_start_then_a_config_error(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot_toml = home.root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + "\n[channels.telegram]\n[channels.slack]\n")
    home = Home(home.root)
    made: dict[str, StartsBadly] = {}

    def create(bot: Bot, platform: str, dispatcher: Dispatcher) -> StartsBadly:
        error = OSError("refused") if platform == "slack" else ConfigError("bad token")
        made[platform] = StartsBadly(
            f"{platform}:{bot.name}", error, 1 if platform == "slack" else 9
        )
        return made[platform]

    monkeypatch.setattr(manager, "create_channel", create)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    running = await manager.start_channels(home, dispatcher, first_delay=0.01, wait=2)
    slack, telegram = running.health["slack:atlas"], running.health["telegram:atlas"]
    heard: list[str] = []
    slack.listen(lambda _n, h: heard.append(h.state))
    await until(lambda: slack.current.state == "up")
    assert made["slack"].attempts == 2
    assert telegram.current.state == "stopped"
    assert telegram.current.reason == "could not start: bad token"
    await asyncio.sleep(0.05)
    assert made["telegram"].attempts == 1, "a ConfigError is not retried"
    await manager.stop_channels(running)
    assert slack.current.reason == "Atlas stopped"
    await runtime.close()


async def test_background_work_that_fails_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks()

    async def breaks() -> None:
        raise KeyError("message_ts")

    with caplog.at_level(logging.ERROR, logger="atlas"):
        tasks.spawn(breaks())
        await until(lambda: caplog.records)
    [record] = caplog.records
    assert "background task" in record.message and record.exc_info is not None
    await tasks.cancel_all()


def test_health_round_trips_through_json() -> None:
    health = Health("reconnecting", datetime(2026, 12, 4, 8, 0, tzinfo=UTC), "why", "")
    assert Health.from_json(health.as_json()) == health
    with pytest.raises(ValueError, match="unknown state"):
        Health.from_json({**health.as_json(), "state": "sleeping"})
