"""The delegation record's search on atlas.db: which instances match a filter or the person's
words (FTS5 over the entries), and an instance's matching entries with snippets. Beside the
record (atlas/executors/record.py) and its rows (record_rows.py), which both read it, so that
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.store.search import fts_query

if TYPE_CHECKING:
    import sqlite_utils


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
