"""A permission prompt of the person's own Claude Code session, asked through Atlas, goes into
the delegation record with its answer and who gave it (atlas/executors/desk_record.py), as a
delegated task's prompts do."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from atlas.channels.base import Address
from atlas.executors.bridge import ExecutorBridge
from atlas.executors.desk_record import DeskRecord
from atlas.executors.record import DelegationRecord
from atlas.executors.workbench import Workbench
from atlas.store.home_db import HomeStore
from atlas.tools.delegation_search import delegation_search
from tests.helpers import Person, run_context
from tests.unit.test_claude_plugin import bash, decision, event, run_hook
from tests.unit.test_desk_record import home_with_claude

WHERE = Address("atlas", "telegram:atlas", "42")


async def test_desk_permission_prompts_are_recorded_with_their_answers() -> None:
    root = Path(tempfile.mkdtemp(prefix="atlas-w4-", dir="/tmp"))  # a Unix socket's short path
    try:
        home = home_with_claude(root)
        store = HomeStore(home.db_path)
        workbench = Workbench()
        person = Person("allow once")

        async def asker() -> tuple[Person, Address]:
            return person, WHERE

        desk = DeskRecord(DelegationRecord(store), home)  # type: ignore[arg-type]
        bridge = ExecutorBridge(home, lambda: workbench, asker, desk_record=desk)
        await bridge.start()
        env = {"CLAUDE_CONFIG_DIR": str(root / "cc")}
        try:
            await run_hook(home, event("UserPromptSubmit", prompt="clean the build"), **env)
            code, out, _, _ = await run_hook(home, bash("rm -rf build"), **env)
            assert code == 0 and decision(out)["behavior"] == "allow"
            person.answer = None  # the next one: no answer in time
            bridge.wait_seconds = 0.2
            await run_hook(home, bash("rm -rf dist"), **env)
            await run_hook(home, event("Stop"), **env)
            await desk.drain()
        finally:
            await bridge.stop()
            await store.close()
        assert [question for question, _ in person.asked][0].startswith("ex-")
        [instance] = workbench.list()
        arguments = {"instance_id": instance.id}
        text = (await delegation_search.invoke(run_context(home), arguments)).text
        assert "[prompt] clean the build" in text
        assert "[question] wants to use Bash rm -rf build" in text
        assert "[answer by the person] Bash rm -rf build: allowed" in text
        assert (
            "[answer by nobody (no answer in time)] Bash rm -rf dist: no answer in time: "
            "asked at the desk"
        ) in text
    finally:
        shutil.rmtree(root, ignore_errors=True)
