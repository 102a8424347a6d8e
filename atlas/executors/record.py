"""The delegation record: every turn of every executor instance, in `atlas.db` (tables
`executor_turns` and `executor_entries`, migration 006 of atlas/store/home_db.py).

A turn is one run of the harness on one prompt: its prompt, the steers sent into it, the
questions it asked and who answered them, its final text or error, its usage, and the files it
changed (the folder's `git diff HEAD --stat` before and after). The entries carry an FTS5 index
(the conversations' tokenizer: words, stems, accents ignored); `delegation_search` reads it all
back (atlas/tools/delegation_search.py). The writes go through `RecordRows`
(atlas/executors/record_rows.py): atlas.db's SQL, or PostgreSQL's (atlas/store/pg/executors.py),
and so do the reads below (the SQLite side; PostgreSQL's are its own).

    record = DelegationRecord(home_store, home=home)
    turn = await record.start_turn(instance_id, executor, account, folder, prompt, conversation)
    await record.add(turn, "question", "Which database?")
    await record.add(turn, "answer", "Which database?: postgres", who="pat")
    await record.finish_turn(turn, final_text, files_changed, usage, "done")

The harness's session id, needed to read its own log back, comes with `add(turn, "session",
id)`, `finish_turn(..., session_id=)` or, when the record follows the workbench, off the
instance there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from atlas.executors.record_rows import (
    RecordRows,
    changed_files,
    instance_turns_of,
    record_rows,
)
from atlas.store.db import utc_now_iso

if TYPE_CHECKING:
    from atlas.executors.workbench import Workbench
    from atlas.home import Home
    from atlas.store.home_db import HomeStore

ENTRY_KINDS = ("prompt", "steer", "question", "answer", "final", "error", "files")
SESSION = "session"  # add(turn, "session", id): the harness named its session
__all__ = ["DelegationRecord", "changed_files"]  # changed_files: atlas/executors/record_rows.py


class DelegationRecord:
    """Writes the record; `home` lets it take the folder's diff stat before a turn (in the
    sandbox, as the handoff packet does); `follow(workbench)` reads session ids off it."""

    def __init__(self, store: HomeStore | RecordRows, *, home: Home | None = None) -> None:
        self.store = store
        self.rows = record_rows(store)  # atlas.db's SQL, or another engine's
        self.home = home
        self._session_of: Callable[[str], str | None] | None = None
        self._instances: dict[int, str] = {}  # turn -> instance, for the session id

    def follow(self, workbench: Workbench) -> None:
        """Take each instance's session id from the workbench where the calls do not give it."""

        def session_of(instance_id: str) -> str | None:
            instance = workbench.get(instance_id)
            return instance.session_id if instance is not None else None

        self._session_of = session_of

    async def start_turn(
        self,
        instance_id: str,
        executor: str,
        account: str,
        folder: str,
        prompt: str,
        conversation: str | None,
        *,
        owner: str = "atlas",
        session_id: str | None = None,
        files_before: str | None = None,
    ) -> int:
        """A new turn of an instance, and its prompt; its id for the other calls. A turn with no
        session id takes the instance's last one (a resume goes on in the same session)."""
        if files_before is None:
            files_before = await self._diff_stat(folder)
        session_id = session_id or self._live_session(instance_id)
        row = {
            "instance_id": instance_id,
            "executor": executor,
            "account": account,
            "folder": folder,
            "conversation": conversation,
            "owner": owner,
            "session_id": session_id,
            "prompt": prompt,
            "files_before": files_before,
            "state": "running",
            "started_at": utc_now_iso(),
        }

        turn_id = await self.rows.start_turn(row)
        self._instances[turn_id] = instance_id
        return turn_id

    async def add(self, turn_id: int, kind: str, text: str, who: str | None = None) -> None:
        """One thing that happened in a turn: steer, question, answer (who answered), final,
        error; or `session` with the harness's session id."""
        if kind == SESSION:
            await self.rows.set_turn_session(turn_id, text)
            return
        if kind not in ENTRY_KINDS:
            raise ValueError(f"delegation record: unknown entry kind {kind!r} ({ENTRY_KINDS})")
        await self.rows.add_entry(turn_id, kind, text, who)

    async def finish_turn(
        self,
        turn_id: int,
        final_text: str,
        files_changed: str,
        usage: dict[str, Any] | None,
        state: str,
        *,
        session_id: str | None = None,
    ) -> None:
        """The end of a turn: its final text (an entry too, unless `add` gave it already), the
        folder's diff stat after it, its usage and how it ended."""
        session_id = session_id or self._live_session(self._instances.pop(turn_id, ""))

        await self.rows.finish_turn(turn_id, final_text, files_changed, usage, state, session_id)

    def _live_session(self, instance_id: str) -> str | None:
        return self._session_of(instance_id) if self._session_of and instance_id else None

    async def _diff_stat(self, folder: str) -> str:
        if self.home is None:
            return ""
        from atlas.executors.handoff import diff_stat

        return await diff_stat(self.home, Path(folder))


# ---- reading back (delegation_search) ---------------------------------------------------------


def instance_turns(db: sqlite_utils.Database, instance_id: str) -> list[dict[str, Any]]:
    """Every turn of an instance in order, each with its `entries` in order."""
    return instance_turns_of(db, instance_id)
