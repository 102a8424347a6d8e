"""Where a routine reports is checked when it is written: the docs' and the shipped examples
load and deliver to the bot's own channel; a channel no bot runs is an error naming the file
and line; a report that did not arrive is never shown as a green `ok`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from atlas.dashboard.render import environment
from atlas.errors import ConfigError
from atlas.home import REPO_ROOT, Home
from atlas.providers.scripted import Reply
from atlas.routines.cli import _run_line
from atlas.routines.files import read_routine_file, reconcile_files
from atlas.routines.store import RoutineRun
from atlas.routines.targets import resolve_channel
from tests.helpers import give_telegram_channel
from tests.unit.test_routines import Rig, home_with, telegram_rig  # noqa: F401 (a fixture)


def docs_routines() -> list[str]:
    """Every routine file docs/routines.md shows (a TOML block with a schedule and a prompt)."""
    text = (REPO_ROOT / "docs" / "routines.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    found = [block for block in blocks if "schedule =" in block and "prompt =" in block]
    assert found, "docs/routines.md shows a routine file"
    # A pre-check needs run_command in a sandbox: tests/integration/test_routine_precheck.py
    # runs those examples, both ways.
    return [block for block in found if "precheck =" not in block]


def shipped_routines() -> list[tuple[str, str]]:
    """The repo's example routine files as a person arms them, as their comments say: the
    target uncommented (chat set to the example's) and `paused` removed."""
    armed = []
    for path in sorted((REPO_ROOT / "routines").glob("*.toml")):
        text = re.sub(r"^# (\[target\]|channel =|chat =)", r"\1", path.read_text(), flags=re.M)
        armed.append((path.stem, text.replace("paused = true", "paused = false")))
    assert armed, "the repo ships example routines"
    return armed


async def test_every_example_routine_loads_and_is_delivered_to_the_bots_channel(
    telegram_rig: Rig,  # noqa: F811 (the fixture imported above)
) -> None:
    rig = telegram_rig  # the main bot has a Telegram channel; a recording one stands in
    files = {f"docs-{i}": text for i, text in enumerate(docs_routines())}
    files |= dict(shipped_routines())
    for name, text in files.items():
        (rig.home.routines_dir / f"{name}.toml").write_text(text)
    for stale in set(rig.home.routines_dir.glob("*.toml")) - {
        rig.home.routines_dir / f"{name}.toml" for name in files
    }:
        stale.unlink()
    report = await reconcile_files(rig.home, rig.scheduler.store)
    assert report.problems == [] and sorted(report.created) == sorted(files)
    await rig.scheduler.start()
    for name in files:
        routine = await rig.scheduler.store.find("atlas", name)
        assert routine is not None and routine.target is not None, name
        assert routine.target.channel == "telegram:atlas", routine.target
        rig.model.add(Reply(f"report of {name}"))
        run_id = await rig.scheduler.run_now(routine)
        await rig.scheduler.wait_runs()
        run = await rig.scheduler.store.get_run(run_id)
        assert run is not None and run.outcome == "ok", (name, run)
        assert run.delivery.startswith("delivered to telegram:atlas:"), run.delivery
        address, text = rig.channel.sent[-1]
        assert (address.channel, address.chat, text) == (
            "telegram:atlas",
            routine.target.chat,
            f"report of {name}",
        )


def test_a_channel_no_bot_runs_is_an_error_naming_the_file_and_line(home: Home) -> None:
    path = home.routines_dir / "lost.toml"
    path.write_text(
        'schedule = "every 1h"\nprompt = "x"\n\n[target]\nchannel = "telegram:ghost"\nchat = "1"\n'
    )
    with pytest.raises(ConfigError) as caught:
        read_routine_file(path, home)
    message = str(caught.value)
    assert str(path) in message and "target.channel (line 5)" in message
    assert "'telegram:ghost' is not a channel of this home" in message


def test_a_platform_alone_is_the_bots_own_channel_and_one_it_lacks_is_named(
    home_path: Path,
) -> None:
    home_with(home_path)
    give_telegram_channel(home_path)
    home = Home(home_path)
    assert resolve_channel(home, "atlas", "telegram") == "telegram:atlas"
    assert resolve_channel(home, "atlas", "telegram:atlas") == "telegram:atlas"
    with pytest.raises(ConfigError, match=r"bot 'atlas' has no slack channel \(its channels: "):
        resolve_channel(home, "atlas", "slack")


def run_record(status: str, delivery: str) -> RoutineRun:
    return RoutineRun(
        id=7, routine_id=1, bot="atlas", name="news", trigger="schedule", scheduled_for=None,
        started_at="2026-12-05T08:00:00+00:00", ended_at="2026-12-05T08:00:05+00:00",
        status=status, input_tokens=1, output_tokens=1, delivery=delivery,
        conversation_id=None, error="", text="hi",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "delivery", "shown"),
    [
        ("ok", "delivered to telegram:atlas:1", "ok"),
        ("ok", "not delivered to telegram:42: no channel named 'telegram'", "undelivered"),
        ("ok", "may not have reached telegram:atlas:1 (not sent again)", "undelivered"),
        ("ok", "no target (kept in the history only)", "ok"),
        ("silent", "silent", "silent"),
        ("failed", "not delivered to telegram:atlas:1: down", "failed"),
    ],
)
def test_a_report_that_did_not_arrive_is_shown_undelivered(
    status: str, delivery: str, shown: str
) -> None:
    run = run_record(status, delivery)
    assert run.outcome == shown
    assert f" {shown} " in _run_line(run)
    html = (
        environment()
        .get_template("routine_runs.html")
        .render(
            view=type("View", (), {"routine": type("R", (), {"id": 1}), "last": [run]}),
            page=1,
            more=False,
            when=str,
        )
    )
    assert f'<td class="verdict {shown}">{shown}</td>' in html


def test_doctor_names_a_routine_file_that_will_be_skipped(home: Home) -> None:
    from atlas.doctor import _routines_check

    assert _routines_check(home).ok
    (home.routines_dir / "lost.toml").write_text(
        'schedule = "every 1h"\nprompt = "x"\n[target]\nchannel = "telegram"\nchat = "1"\n'
    )
    check = _routines_check(home)
    assert not check.ok and "lost.toml" in check.detail
    assert "bot 'atlas' has no telegram channel" in check.detail
