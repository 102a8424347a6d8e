"""PostgreSQL schema steps 20-29: pairing, executors' records, the dashboard's reads and the
chats' `/new` generations."""

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
    (
        21,
        "executor_records",
        (
            # The columns of atlas.db's tables of the same names (atlas/store/home_db.py):
            # the executor tasks as rows, and the delegation record's turns and entries.
            "CREATE TABLE executor_tasks (id TEXT PRIMARY KEY, bot TEXT, "
            "conversation_id BIGINT, run_kind TEXT, executor TEXT, account TEXT, folder TEXT, "
            "goal TEXT, title TEXT, route TEXT, session_id TEXT, state TEXT, detail TEXT, "
            "last_event TEXT, result_summary TEXT, started_at TEXT, ended_at TEXT, "
            "updated_at TEXT, reported_at TEXT)",
            "CREATE INDEX executor_tasks_state ON executor_tasks (state)",
            "CREATE INDEX executor_tasks_started ON executor_tasks (started_at)",
            "CREATE TABLE executor_turns (id BIGSERIAL PRIMARY KEY, instance_id TEXT, "
            "executor TEXT, account TEXT, folder TEXT, conversation TEXT, owner TEXT, "
            "session_id TEXT, prompt TEXT, final_text TEXT, files_before TEXT, "
            "files_after TEXT, usage TEXT, state TEXT, started_at TEXT, ended_at TEXT)",
            "CREATE INDEX executor_turns_by_instance ON executor_turns (instance_id, id)",
            "CREATE INDEX executor_turns_started ON executor_turns (started_at)",
            # `words`: the entry's text and who, searched as atlas.db's FTS5 index of them is
            # (split as unicode61, Porter stems, accents removed: the messages' `words`).
            "CREATE TABLE executor_entries (id BIGSERIAL PRIMARY KEY, "
            "turn_id BIGINT NOT NULL REFERENCES executor_turns (id), kind TEXT NOT NULL, "
            "who TEXT, text TEXT NOT NULL, at TEXT, words TSVECTOR NOT NULL)",
            "CREATE INDEX executor_entries_by_turn ON executor_entries (turn_id, id)",
            "CREATE INDEX executor_entries_words ON executor_entries USING gin (words)",
        ),
    ),
    (
        22,
        "chat_generations",
        (
            # atlas.db's table of the same name: how often `/new` restarted a chat.
            "CREATE TABLE chat_generations (channel TEXT NOT NULL, chat TEXT NOT NULL, "
            'thread TEXT NOT NULL, "user" TEXT NOT NULL, generation BIGINT NOT NULL, '
            'PRIMARY KEY (channel, chat, thread, "user"))',
        ),
    ),
]
