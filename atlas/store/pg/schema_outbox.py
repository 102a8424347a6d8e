"""PostgreSQL schema steps 10-19: the outbox and routine fires."""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = [
    (
        10,
        "outbox",
        (
            # The columns of a bot's conversations.db `outbox` (atlas/outbox/rows.py), plus the
            # bot (one table for every bot) and the epoch of the sender that claimed the row.
            "CREATE TABLE outbox (id BIGSERIAL PRIMARY KEY, bot TEXT NOT NULL, "
            "channel TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL DEFAULT '', "
            "\"user\" TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL, text TEXT NOT NULL DEFAULT '', "
            "files TEXT, message_id BIGINT, key TEXT, state TEXT NOT NULL, "
            "attempts INTEGER NOT NULL DEFAULT 0, error TEXT, platform_id TEXT, "
            "created_at TEXT NOT NULL, sending_at TEXT, settled_at TEXT, epoch BIGINT)",
            # Enqueueing the same thing twice is one row, per bot (as SQLite's file per bot).
            "CREATE UNIQUE INDEX outbox_key ON outbox (bot, key) WHERE key IS NOT NULL",
            # What a start resumes and a claim picks: the few rows not settled.
            "CREATE INDEX outbox_unsettled ON outbox (bot, id) WHERE settled_at IS NULL",
            # The newest lease epoch that has sent a bot's rows: a sender below it is stale.
            "CREATE TABLE outbox_fences (bot TEXT PRIMARY KEY, epoch BIGINT NOT NULL)",
        ),
    ),
    (
        11,
        "routines_and_runs",
        (
            # The columns of atlas.db's tables of the same names (atlas/store/home_db.py).
            "CREATE TABLE routines (id BIGSERIAL PRIMARY KEY, bot TEXT NOT NULL, "
            "name TEXT NOT NULL, prompt TEXT NOT NULL, schedule TEXT NOT NULL, channel TEXT, "
            'chat TEXT, thread TEXT, "user" TEXT, paused INTEGER NOT NULL DEFAULT 0, '
            "grace_seconds INTEGER, source TEXT, source_digest TEXT, armed_at TEXT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, precheck TEXT)",
            "CREATE UNIQUE INDEX routines_bot_name ON routines (bot, name)",
            "CREATE TABLE routine_runs (id BIGSERIAL PRIMARY KEY, routine_id BIGINT NOT NULL, "
            "bot TEXT NOT NULL, name TEXT NOT NULL, trigger TEXT NOT NULL, scheduled_for TEXT, "
            "started_at TEXT NOT NULL, ended_at TEXT, status TEXT NOT NULL, "
            "input_tokens BIGINT, output_tokens BIGINT, delivery TEXT, conversation_id BIGINT, "
            "error TEXT, text TEXT, owed TEXT)",
            "CREATE INDEX routine_runs_by_routine ON routine_runs (routine_id, id)",
            # A scheduled fire is run once across the home: two schedulers firing the same
            # routine for the same slot make one row; the second is told "already fired".
            "CREATE UNIQUE INDEX routine_runs_fire ON routine_runs (routine_id, scheduled_for) "
            "WHERE trigger <> 'manual' AND scheduled_for IS NOT NULL",
        ),
    ),
]
