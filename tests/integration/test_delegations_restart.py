"""Delegations survive a restart (issue 34, item 4): the executor tasks are rows in atlas.db.

As people use it: a conversation delegates to the fake `claude` (tests/fakes/fake_claude.py) in
the real sandbox, the daemon stops (cleanly, or killed with SIGKILL in a real process), and a
new daemon on the same home lists the task, reports it once to the conversation that started
it (a notice, answered by the bot's turn), resumes it in its session when asked, and
delegation_search still finds it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from atlas.agents.services import HomeServices, provide_services
from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.executors.restart import RestoreReport, restore_delegations
from atlas.executors.task_rows import TaskRows
from atlas.home import Home
from atlas.providers.scripted import Reply
from atlas.runtime import Runtime
from atlas.sandbox.proxy import stop_proxies
from atlas.store.home_db import HomeStore
from atlas.tools.delegate import delegate
from atlas.tools.delegation_search import delegation_search
from atlas.tools.registry import ToolRegistry
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

FAKES = Path(__file__).resolve().parents[1] / "fakes"
REPO = Path(__file__).resolve().parents[2]
ADDRESS = Address("atlas", "test", "chat-1", user="u1")
ASKED = "fix it with claude"


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("project", "claude-main")}
    for path in made.values():
        path.mkdir()
    return made


@pytest.fixture
def home(tmp_path: Path, folders: dict[str, Path]) -> Home:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f"\n[review]\nenabled = false\n\n[executors.claude-code]\nenabled = true\n"
        f'binary = "{FAKES / "fake_claude.py"}"\n'
        f'accounts = {{ main = "{folders["claude-main"]}" }}\n'
    )
    return make_home(tmp_path / "home", config=config)


def scenario(folders: dict[str, Path], name: str) -> None:
    (folders["claude-main"] / "fake-scenario").write_text(name)


def first_turn(project: Path) -> ConversationModel:
    tasks = [{"goal": "fix the bug slowly", "folder": str(project)}]
    return ConversationModel(
        {
            ASKED: [
                Reply(calls=[("delegate", {"executor": "claude-code", "tasks": tasks})]),
                Reply("Claude Code is on it."),
            ]
        }
    )


@dataclass
class Daemon:
    """The daemon's parts over a home, in this process: runtime, dispatcher, services."""

    runtime: Runtime
    dispatcher: Dispatcher
    services: HomeServices
    channel: RecordingChannel

    @classmethod
    def start(cls, home: Home, model: ConversationModel) -> Daemon:
        registry = ToolRegistry([delegate, delegation_search])
        runtime = Runtime(home, model=model, registry=registry)
        channel = RecordingChannel()
        dispatcher = Dispatcher(runtime, {"test": channel})
        return cls(runtime, dispatcher, provide_services(dispatcher), channel)

    async def restore(self) -> RestoreReport:
        """What the daemon does at start (atlas/executors/restart.py, from atlas/daemon.py)."""
        rows = TaskRows(self.runtime.audit)
        return await restore_delegations(self.dispatcher, self.services.workbench, rows)

    async def stop(self) -> None:
        """What the daemon does at its stop (atlas/services.py stop_turns, then the runtime)."""
        await self.services.close()
        await self.dispatcher.shutdown()
        await self.runtime.close()


@pytest.fixture
async def cleanup() -> AsyncIterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        await daemon.stop()
    await stop_proxies()


async def stored_row(home: Home, task_id: str) -> dict[str, Any] | None:
    store = HomeStore(home.db_path)
    try:
        return await TaskRows(store).get(task_id)
    finally:
        await store.close()


async def the_task_runs(home: Home, folders: dict[str, Path]) -> tuple[Daemon, str, str]:
    """The first daemon: the conversation delegates a slow task; its id and session once the
    harness has started."""
    scenario(folders, "slow")
    first = Daemon.start(home, first_turn(folders["project"]))
    await first.dispatcher.submit(Inbound(ADDRESS, ASKED))
    await eventually(lambda: first.channel.texts(ADDRESS) == ["Claude Code is on it."])
    bench = first.services.workbench
    await eventually(lambda: bool(bench.list() and bench.list()[0].session_id), what="a session")
    [instance] = bench.list()
    assert instance.state == "running"
    # The harness names its session before it writes the session's log: a stop in between
    # would leave nothing to resume (as with the real claude), so wait for the log.
    log = f"{instance.session_id}.jsonl"
    projects = folders["claude-main"] / "projects"
    await eventually(
        lambda: any(p.stat().st_size for p in projects.rglob(log)), what="the session's log"
    )
    return first, instance.id, str(instance.session_id)


async def after_the_restart(
    home: Home, folders: dict[str, Path], task_id: str, session: str, started: list[Daemon]
) -> None:
    """The second daemon: the task listed as interrupted, reported once to its conversation,
    resumed in its session when the person asks, found by delegation_search."""
    scenario(folders, "success")
    model = ConversationModel(
        {
            ASKED: [
                Reply("Your Claude Code task was interrupted by a restart."),  # the report's turn
                Reply(calls=[("delegate", {"action": "list"})]),
                Reply(
                    calls=[
                        (
                            "delegate",
                            {"action": "resume", "subagent_id": task_id, "message": "go on"},
                        )
                    ]
                ),
                Reply("It goes on."),
                Reply("Claude Code finished."),  # the resumed task's notice
            ]
        }
    )
    second = Daemon.start(home, model)
    started.append(second)
    report = await second.restore()
    assert report.reported == [task_id], report
    await eventually(lambda: len(second.channel.texts(ADDRESS)) == 1, what="the report's turn")
    notice = model.requests(ASKED)[0].messages[-1].content
    assert f"Executor task {task_id} (claude-code@main" in notice and "was interrupted" in notice
    assert f"delegate action=resume, subagent_id={task_id}" in notice and session in notice

    await second.dispatcher.wait_idle(ADDRESS)
    await second.dispatcher.submit(Inbound(ADDRESS, "what about it? go on with it"))
    await eventually(lambda: len(second.channel.texts(ADDRESS)) == 2, what="the resume's turn")
    listing = model.requests(ASKED)[2].messages[-1].content
    assert f"- {task_id} (interrupted, yours, claude-code@main" in listing
    resumed = model.requests(ASKED)[3].messages[-1].content
    assert resumed.startswith(f"{task_id} goes on on claude-code@main"), resumed
    await eventually(lambda: len(second.channel.texts(ADDRESS)) == 3, what="its notice's turn")
    done = model.requests(ASKED)[4].messages[-1].content
    assert f"resumed {session} (" in done and "Done: go on" in done, done
    model.assert_complete()
    [instance] = second.services.workbench.list()
    assert instance.state == "done"

    # Told once: the next start reports nothing more; the search reads the record.
    assert (await second.restore()).reported == []
    run = run_context(home, services=second.services)
    found = await delegation_search.invoke(run, {"query": "fix the bug slowly"})
    assert not found.is_error and task_id in found.text


async def test_a_task_the_stop_cut_is_reported_and_resumed_after_the_restart(
    home: Home, folders: dict[str, Path], cleanup: list[Daemon]
) -> None:
    first, task_id, session = await the_task_runs(home, folders)
    await first.stop()  # SIGTERM's path: the task is cut, not stopped by anyone
    row = await stored_row(home, task_id)
    assert row is not None and row["state"] == "interrupted" and row["session_id"] == session
    await after_the_restart(home, folders, task_id, session, cleanup)


KILLED_RUN = """
import asyncio, sys
from pathlib import Path
from atlas.home import Home
from atlas.dispatch import Inbound
from tests.integration.test_delegations_restart import ADDRESS, ASKED, Daemon, first_turn

async def main() -> None:
    home = Home(Path(sys.argv[1]))
    daemon = Daemon.start(home, first_turn(Path(sys.argv[2])))
    await daemon.dispatcher.submit(Inbound(ADDRESS, ASKED))
    bench = daemon.services.workbench
    while not (bench.list() and bench.list()[0].session_id):
        await asyncio.sleep(0.02)
    print(bench.list()[0].id, bench.list()[0].session_id, flush=True)
    await asyncio.sleep(600)  # until killed

asyncio.run(main())
"""


async def test_a_task_of_a_killed_daemon_is_reported_and_resumed_at_the_next_start(
    home: Home, folders: dict[str, Path], cleanup: list[Daemon]
) -> None:
    scenario(folders, "slow")
    script = textwrap.dedent(KILLED_RUN)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        str(home.root),
        str(folders["project"]),
        cwd=REPO,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        task_id, session = line.decode().split()
    finally:
        process.send_signal(signal.SIGKILL)  # no stop runs: the row still says running
        await process.wait()
    row = await stored_row(home, task_id)
    assert row is not None and row["state"] == "running"
    await after_the_restart(home, folders, task_id, session, cleanup)
