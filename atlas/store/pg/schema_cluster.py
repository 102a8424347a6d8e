"""PostgreSQL schema steps 30-39: nodes, leases, messages and the questions turns wait on,
between nodes (atlas/cluster/).

Times here are `TIMESTAMPTZ` set by the server (`now()`), not the UTC text of the other
tables: lease expiry compares them with the server's clock only, because the machines' own
clocks differ (atlas/cluster/leases.py).
"""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = [
    (
        30,
        "nodes_leases_and_node_messages",
        (
            # One row per node name; `epoch` counts its registrations, so a second process
            # started under the same name supersedes the first (its heartbeats then fail).
            "CREATE TABLE nodes (name TEXT PRIMARY KEY, epoch BIGINT NOT NULL, "
            "host TEXT NOT NULL DEFAULT '', pid INTEGER, started_at TIMESTAMPTZ NOT NULL, "
            "heartbeat_at TIMESTAMPTZ NOT NULL, left_at TIMESTAMPTZ)",
            # A row per resource ("bot:NAME", "scheduler") that is never deleted: a release
            # clears `holder`, so `epoch` only ever grows and a fence never sees an old
            # number again.
            "CREATE TABLE leases (resource TEXT PRIMARY KEY, holder TEXT, "
            "epoch BIGINT NOT NULL, acquired_at TIMESTAMPTZ NOT NULL, "
            "expires_at TIMESTAMPTZ NOT NULL)",
            "CREATE TABLE node_messages (id BIGSERIAL PRIMARY KEY, to_bot TEXT NOT NULL, "
            "kind TEXT NOT NULL, body JSONB NOT NULL, from_node TEXT NOT NULL DEFAULT '', "
            "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), taken_by TEXT, "
            "taken_epoch BIGINT, taken_at TIMESTAMPTZ)",
            "CREATE INDEX node_messages_waiting ON node_messages (to_bot, id) "
            "WHERE taken_by IS NULL",
        ),
    ),
    (
        31,
        "node_asks",
        (
            # The approvals a node's turns wait on, listed on every node's dashboard
            # (atlas/cluster/asks.py); `outcome` is set once the asking node settled it.
            "CREATE TABLE node_asks (id TEXT PRIMARY KEY, node TEXT NOT NULL, "
            "bot TEXT NOT NULL, address JSONB NOT NULL, conversation_id BIGINT NOT NULL, "
            "question TEXT NOT NULL, choices JSONB NOT NULL, "
            "asked_at TIMESTAMPTZ NOT NULL DEFAULT now(), outcome TEXT)",
            "CREATE INDEX node_asks_open ON node_asks (node) WHERE outcome IS NULL",
        ),
    ),
    (
        32,
        "node_asks_question_sets",
        (
            # Every question a turn waits on, not approvals only: ask_user's sets (each
            # question's text, choices, multi_select) and a subagent's question (who asks).
            "ALTER TABLE node_asks ADD COLUMN kind TEXT NOT NULL DEFAULT 'approval', "
            "ADD COLUMN questions JSONB NOT NULL DEFAULT '[]'::jsonb, "
            "ADD COLUMN asker TEXT NOT NULL DEFAULT ''",
        ),
    ),
]
