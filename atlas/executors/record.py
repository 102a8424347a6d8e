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
from dataclasses import dataclass
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
from atlas.store.search import fts_query

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


@dataclass(frozen=True)
class RecordFilter:
    """Which turns count: an executor (`codex`) or an account (`claude-code@work`), part of the
    folder's path, a UTC ISO time range [after, before) on when a turn started, the bot whose
    conversations started them (None: every one's, and the person's own)."""

    executor: str | None = None
    folder: str | None = None
    after: str | None = None
    before: str | None = None
    bot: str | None = None
    exclude: tuple[str, ...] = ()

    def sql(self, params: dict[str, Any]) -> list[str]:
        """WHERE conditions on `executor_turns AS t`, their values added to params."""
        conditions = []
        if self.executor:
            column = "t.account" if "@" in self.executor else "t.executor"
            conditions.append(f"{column} = :executor")
            params["executor"] = self.executor
        if self.folder:
            wanted = {self.folder, str(Path(self.folder).expanduser())}
            likes = []
            for i, part in enumerate(sorted(wanted)):
                likes.append(f"t.folder LIKE :folder{i} ESCAPE '\\'")
                escaped = part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                params[f"folder{i}"] = f"%{escaped}%"
            conditions.append(f"({' OR '.join(likes)})")
        if self.after:
            conditions.append("t.started_at >= :after")
            params["after"] = self.after
        if self.before:
            conditions.append("t.started_at < :before")
            params["before"] = self.before
        if self.bot:
            conditions.append("t.conversation LIKE :bot ESCAPE '\\'")
            params["bot"] = self.bot.replace("%", "\\%").replace("_", "\\_") + ":%"
        if self.exclude:
            names = [f":exclude{i}" for i in range(len(self.exclude))]
            params.update({f"exclude{i}": value for i, value in enumerate(self.exclude)})
            conditions.append(f"t.instance_id NOT IN ({', '.join(names)})")
        return conditions or ["1"]


@dataclass(frozen=True)
class InstanceSummary:
    """One instance as the record knows it: its turns' span, count, and how the last ended."""

    instance_id: str
    turns: int
    first_at: str
    last_at: str
    score: float = 0.0
    hits: int = 0


def latest_instances(
    db: sqlite_utils.Database, where: RecordFilter, *, limit: int, oldest: bool = False
) -> list[InstanceSummary]:
    """The instances with turns passing `where`, latest (or oldest) first."""
    params: dict[str, Any] = {"limit": limit}
    order = "first_at, instance_id" if oldest else "last_at DESC, instance_id"
    sql = (
        "SELECT t.instance_id, COUNT(*) AS turns, MIN(t.started_at) AS first_at, "
        "MAX(COALESCE(t.ended_at, t.started_at)) AS last_at FROM executor_turns AS t "
        f"WHERE {' AND '.join(where.sql(params))} GROUP BY t.instance_id "
        f"ORDER BY {order} LIMIT :limit"
    )
    return [InstanceSummary(**row) for row in db.query(sql, params)]


def match_instances(
    db: sqlite_utils.Database, text: str, where: RecordFilter, *, limit: int
) -> list[InstanceSummary]:
    """The instances whose entries match the person's words (all of them), best first: bm25
    summed over an instance's matching entries (each negative), so several good matches beat
    one short one."""
    match = fts_query(text)
    if match is None:
        return []
    params: dict[str, Any] = {"limit": limit, "match": match}
    sql = (
        "SELECT t.instance_id, COUNT(DISTINCT t.id) AS turns, MIN(t.started_at) AS first_at, "
        "MAX(COALESCE(t.ended_at, t.started_at)) AS last_at, SUM(executor_entries_fts.rank) "
        "AS score, COUNT(*) AS hits FROM executor_entries_fts "
        "JOIN executor_entries AS e ON e.id = executor_entries_fts.rowid "
        "JOIN executor_turns AS t ON t.id = e.turn_id "
        f"WHERE executor_entries_fts MATCH :match AND {' AND '.join(where.sql(params))} "
        "GROUP BY t.instance_id ORDER BY score, last_at DESC LIMIT :limit"
    )
    return [InstanceSummary(**row) for row in db.query(sql, params)]


def matching_entries(
    db: sqlite_utils.Database, text: str, instance_id: str, *, limit: int
) -> list[dict[str, Any]]:
    """An instance's entries matching the words, best first, each with a marked snippet."""
    match = fts_query(text)
    if match is None:
        return []
    sql = (
        "SELECT e.*, t.id AS turn, snippet(executor_entries_fts, 0, '**', '**', '…', 16) "
        "AS snippet FROM executor_entries_fts "
        "JOIN executor_entries AS e ON e.id = executor_entries_fts.rowid "
        "JOIN executor_turns AS t ON t.id = e.turn_id "
        "WHERE executor_entries_fts MATCH :match AND t.instance_id = :instance "
        "ORDER BY executor_entries_fts.rank, e.id LIMIT :limit"
    )
    return list(db.query(sql, {"match": match, "instance": instance_id, "limit": limit}))


def instance_turns(db: sqlite_utils.Database, instance_id: str) -> list[dict[str, Any]]:
    """Every turn of an instance in order, each with its `entries` in order."""
    return instance_turns_of(db, instance_id)
