"""The person's own Claude Code turns, at the desk, in the delegation record (record.py).

The plugin's hooks report them (atlas/executors/bridge.py): a prompt starts a turn, `Stop`
(or `SessionEnd`) ends it, with the last assistant text of the harness's own session log and
the folder's diff stat. A permission prompt Atlas asked the person about goes in as the turn's
question and its answer (who answered, and what), as a delegated task's do. Written behind the hooks' backs, in order, by one worker: a hook waits
for nothing (UserPromptSubmit holds the person's prompt until it is answered), and a failing
record never touches the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.executors import claude_files
from atlas.executors.handoff import diff_stat

if TYPE_CHECKING:
    from atlas.executors.record import DelegationRecord
    from atlas.executors.workbench import Instance
    from atlas.home import Home

log = logging.getLogger(__name__)

EXECUTOR = "claude-code"
ENDS = {"Stop": "done", "SessionEnd": "done"}
PERMISSION = "PermissionRequest"
UNSEEN_PROMPT = "(its prompt came before Atlas was running)"
QUEUED = 1_000  # events waiting to be written; past it, new ones are dropped (and logged)


@dataclass(frozen=True)
class DeskEvent:
    """What the record needs of one hook event."""

    name: str  # UserPromptSubmit, Stop, SessionEnd
    instance: Instance
    session_id: str
    prompt: str
    config_dir: str | None  # CLAUDE_CONFIG_DIR as the hook saw it; None: the default
    # PermissionRequest: `prompt` is the question asked, `answer` what came of it and `who`
    # gave it ("the person", "nobody (no answer in time)").
    answer: str = ""
    who: str | None = None


@dataclass
class _Open:
    turn: int
    folder: Path
    config_dir: str | None


class DeskRecord:
    """Records the person's sessions; `note` from the bridge, `close` when the daemon stops."""

    def __init__(self, record: DelegationRecord, home: Home) -> None:
        self.record = record
        self.home = home
        self._open: dict[str, _Open] = {}  # session id -> its turn under way
        self._queue: asyncio.Queue[DeskEvent] = asyncio.Queue(QUEUED)
        self._worker: asyncio.Task[None] | None = None

    def note(self, event: DeskEvent) -> None:
        """Queue one event (returns at once)."""
        if event.name not in ("UserPromptSubmit", PERMISSION, *ENDS):
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            log.warning("delegation record: the desk's events are behind; one was dropped")
            return
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="desk record")

    async def drain(self) -> None:
        """Until every queued event is written (tests, and a clean stop)."""
        await self._queue.join()

    async def close(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), 5)
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._write(event)
            except Exception:
                log.exception("delegation record: the desk's %s could not be written", event.name)
            finally:
                self._queue.task_done()

    async def _write(self, event: DeskEvent) -> None:
        if event.name == "UserPromptSubmit":
            await self._end(event.session_id, "done")  # a turn whose Stop never came
            instance = event.instance
            turn = await self.record.start_turn(
                instance.id,
                EXECUTOR,
                instance.account,
                str(instance.folder),
                event.prompt,
                None,
                owner="person",
                session_id=event.session_id,
            )
            self._open[event.session_id] = _Open(turn, instance.folder, event.config_dir)
        elif event.name == PERMISSION:
            await self._permission(event)
        else:
            await self._end(event.session_id, ENDS[event.name])

    async def _permission(self, event: DeskEvent) -> None:
        opened = self._open.get(event.session_id)
        if (
            opened is None
        ):  # the turn began before the daemon did: its answers are kept all the same
            instance = event.instance
            turn = await self.record.start_turn(
                instance.id,
                EXECUTOR,
                instance.account,
                str(instance.folder),
                UNSEEN_PROMPT,
                None,
                owner="person",
                session_id=event.session_id,
            )
            opened = self._open[event.session_id] = _Open(turn, instance.folder, event.config_dir)
        await self.record.add(opened.turn, "question", event.prompt)
        await self.record.add(opened.turn, "answer", event.answer, event.who)

    async def _end(self, session_id: str, state: str) -> None:
        turn = self._open.pop(session_id, None)
        if turn is None:
            return
        final = await asyncio.to_thread(_last_answer, turn.config_dir, session_id, turn.folder)
        files = await diff_stat(self.home, turn.folder)
        await self.record.finish_turn(turn.turn, final, files, None, state)


def _last_answer(config_dir: str | None, session_id: str, folder: Path) -> str:
    """The last assistant text of the session, from Claude Code's own log ('' when gone)."""
    where = Path(config_dir).expanduser() if config_dir else claude_files.default_dir()
    log_ = claude_files.session_log(where, session_id, folder)
    answers = [e.text for e in log_.entries if e.role == "assistant"]
    return answers[-1] if answers else ""
