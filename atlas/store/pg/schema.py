"""The home's tables on PostgreSQL, as numbered steps recorded in `schema_version`.

One database holds every bot's conversations (the `bot` column tells them apart, where SQLite
gives each bot its own file), so several machines can share it. Times stay UTC ISO 8601 text,
as in SQLite, so rows read the same from both engines and copy across unchanged.

Search: `words` is the message's tsvector of `atlas_lexemes` (Porter stems, accents removed,
no stop words: as FTS5's `porter unicode61 remove_diacritics 2`), filled on insert from the
text split as FTS5's unicode61 splits it (atlas/store/pg/text.py). Substrings (parts of words, Chinese, Japanese, Korean) use pg_trgm's index under
ILIKE, as FTS5's trigram index does. unaccent and pg_trgm ship with PostgreSQL (contrib)
and are trusted extensions: the database's owner may create them.
"""

from __future__ import annotations

from atlas.store.pg import schema_cluster, schema_outbox, schema_shared
from atlas.store.pg.schema_step import SchemaStep

_WORD_TOKENS = (
    "asciiword, word, numword, asciihword, hword, numhword, hword_asciipart, hword_part, "
    "hword_numpart"
)

_CORE_STEPS: list[SchemaStep] = [
    (
        1,
        "conversations_and_messages",
        (
            "CREATE TABLE conversations (id BIGSERIAL PRIMARY KEY, bot TEXT NOT NULL, "
            "channel TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL DEFAULT '', "
            "\"user\" TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL DEFAULT 'conversation', "
            "title TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
            "CREATE UNIQUE INDEX conversations_key "
            'ON conversations (bot, channel, chat, thread, "user")',
            "CREATE TABLE messages (id BIGSERIAL PRIMARY KEY, bot TEXT NOT NULL, "
            "conversation_id BIGINT NOT NULL REFERENCES conversations (id), role TEXT NOT NULL, "
            "content TEXT NOT NULL DEFAULT '', tool_calls TEXT, tool_call_id TEXT, name TEXT, "
            "images TEXT, usage TEXT, model TEXT, event_id TEXT, "
            "kind TEXT NOT NULL DEFAULT 'message', answers_upto BIGINT, delivered_at TEXT, "
            "sending_at TEXT, created_at TEXT NOT NULL, words TSVECTOR NOT NULL)",
            "CREATE INDEX messages_by_conversation ON messages (conversation_id, id)",
            # A platform event is stored once per bot, whatever the conversation (as SQLite's
            # messages_event_anywhere check): Slack retries after a restart, `!new` moves on.
            "CREATE UNIQUE INDEX messages_event ON messages (bot, event_id) "
            "WHERE event_id IS NOT NULL",
            "CREATE TABLE compactions (id BIGSERIAL PRIMARY KEY, "
            "conversation_id BIGINT NOT NULL REFERENCES conversations (id), "
            "first_kept_id BIGINT NOT NULL, summary TEXT NOT NULL, created_at TEXT NOT NULL)",
            "CREATE INDEX compactions_by_conversation ON compactions (conversation_id, id)",
        ),
    ),
    (
        2,
        "message_search",
        (
            "CREATE EXTENSION IF NOT EXISTS unaccent",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            # The Porter stemmer FTS5 uses (Snowball's `english` stems some words otherwise:
            # it finds "deployment" for "deploy", where Porter does not), no stop-word list.
            "CREATE TEXT SEARCH DICTIONARY atlas_stem (TEMPLATE = snowball, LANGUAGE = porter)",
            # A message's words (split already, atlas/store/pg/text.py) as FTS5's porter
            # tokenizer gives them: lower case, accents removed, and stemmed only when 3 to 64
            # bytes long (FTS5 leaves shorter and longer tokens as they are, where Snowball
            # would make "is" into "i"). Stored with `to_tsvector('simple', ...)`, which keeps
            # them and their positions (phrases) as they are.
            "CREATE FUNCTION atlas_lexemes(words TEXT) RETURNS TEXT LANGUAGE sql STABLE "
            "PARALLEL SAFE AS $$ SELECT COALESCE(string_agg(CASE WHEN octet_length(token) "
            "BETWEEN 3 AND 64 THEN COALESCE((ts_lexize('atlas_stem', token))[1], token) "
            "ELSE token END, ' ' ORDER BY position), '') FROM unnest(string_to_array("
            "lower(unaccent(words)), ' ')) WITH ORDINALITY AS split(token, position) "
            "WHERE token <> '' $$",
            # For the snippets (ts_headline), which parse the stored text itself.
            "CREATE TEXT SEARCH CONFIGURATION atlas_words (COPY = simple)",
            f"ALTER TEXT SEARCH CONFIGURATION atlas_words ALTER MAPPING FOR {_WORD_TOKENS} "
            "WITH unaccent, atlas_stem",
            "CREATE INDEX messages_words ON messages USING gin (words)",
            "CREATE INDEX messages_trigram ON messages USING gin (content gin_trgm_ops)",
        ),
    ),
    (
        3,
        "gate_log_and_delegations",
        (
            # The columns of atlas.db's tables of the same names (atlas/store/home_db.py).
            "CREATE TABLE gate_decisions (id BIGSERIAL PRIMARY KEY, at TEXT, bot TEXT, "
            "conversation_id BIGINT, run_kind TEXT, tool TEXT, arguments_digest TEXT, "
            "summary TEXT, verdict TEXT, rule TEXT, reason TEXT, answered_by TEXT)",
            "CREATE INDEX gate_decisions_at ON gate_decisions (at)",
            "CREATE TABLE delegations (id TEXT PRIMARY KEY, batch TEXT, bot TEXT, "
            "parent_conversation_id BIGINT, parent_run_kind TEXT, goal TEXT, context TEXT, "
            "status TEXT, result TEXT, reason TEXT, spill_path TEXT, conversation_id BIGINT, "
            "input_tokens BIGINT, output_tokens BIGINT, rounds BIGINT, created_at TEXT, "
            "started_at TEXT, ended_at TEXT)",
            "CREATE INDEX delegations_by_parent ON delegations (bot, parent_conversation_id)",
        ),
    ),
    (
        4,
        "messages_by_bot_and_time",
        (
            # The dashboard's figures of a day and its Usage page read a bot's messages since
            # a time (atlas/store/pg/dashboard_pages.py), where SQLite searches ids by time.
            "CREATE INDEX messages_by_bot_time ON messages (bot, created_at)",
        ),
    ),
]

# Each part of the home numbers its steps in a range of its own, so parts can grow apart:
# 1-9 conversations, the gate's log and delegations (here), 10-19 the outbox and routines,
# 20-29 pairing, executors and the dashboard, 30-39 nodes and leases.
STEPS: list[SchemaStep] = sorted(
    _CORE_STEPS + schema_outbox.STEPS + schema_shared.STEPS + schema_cluster.STEPS
)
if len({number for number, _, _ in STEPS}) != len(STEPS):
    raise RuntimeError("two PostgreSQL schema steps share a number")

SCHEMA_VERSION = STEPS[-1][0]
