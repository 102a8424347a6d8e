"""PostgreSQL schema steps 20-29: pairing, executors' records and the dashboard's reads."""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = [
    (
        20,
        "channel_pairing",
        (
            # The columns of atlas.db's tables of the same names (atlas/store/home_db.py).
            "CREATE TABLE pairing_codes (code TEXT PRIMARY KEY, bot TEXT, platform TEXT, "
            "user_id TEXT, user_name TEXT, chat TEXT, created_at TEXT, expires_at TEXT, "
            "status TEXT, decided_at TEXT)",
            "CREATE INDEX pairing_codes_by_user ON pairing_codes (bot, platform, user_id)",
            "CREATE TABLE paired_users (bot TEXT NOT NULL, platform TEXT NOT NULL, "
            "user_id TEXT NOT NULL, user_name TEXT, code TEXT, approved_at TEXT, "
            "PRIMARY KEY (bot, platform, user_id))",
        ),
    ),
]
