"""The home's own database, `atlas.db`: what is not one bot's conversation (gate decisions;
routines later)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from atlas.store.db import Database, Migration, utc_now_iso


def _gate_decisions(db: sqlite_utils.Database) -> None:
    db["gate_decisions"].create(
        {
            "id": int,
            "at": str,
            "bot": str,
            "conversation_id": int,
            "run_kind": str,
            "tool": str,
            "arguments_digest": str,  # sha256 prefix: which call, without storing its content
            "summary": str,  # the command or path judged, cut short
            "verdict": str,  # allow | deny
            "rule": str,
            "reason": str,
            "answered_by": str,  # rule | guardian | user | timeout | nobody
        },
        pk="id",
    )
    db["gate_decisions"].create_index(["at"])


HOME_MIGRATIONS: list[Migration] = [("001_gate_decisions", _gate_decisions)]


@dataclass(frozen=True)
class GateRecord:
    bot: str
    conversation_id: int
    run_kind: str
    tool: str
    arguments_digest: str
    summary: str
    verdict: str
    rule: str
    reason: str
    answered_by: str


class HomeStore:
    """Opened on first use, so a run that never records anything never touches the file."""

    def __init__(self, path: Path) -> None:
        self.db = Database(path, HOME_MIGRATIONS)
        self._opening = asyncio.Lock()

    @property
    def path(self) -> Path:
        return self.db.path

    async def _ready(self) -> Database:
        async with self._opening:
            if not self.db.is_open:
                await self.db.open()
        return self.db

    async def close(self) -> None:
        if self.db.is_open:
            await self.db.close()

    async def record_decision(self, record: GateRecord) -> None:
        row = {"at": utc_now_iso(), **record.__dict__}
        await (await self._ready()).call(lambda db: db["gate_decisions"].insert(row))

    async def recent_decisions(self, limit: int = 20) -> list[dict[str, Any]]:
        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query("SELECT * FROM gate_decisions ORDER BY id DESC LIMIT ?", [limit]))

        return await (await self._ready()).call(select)
