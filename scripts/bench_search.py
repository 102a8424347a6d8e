"""Fill a conversation store with N messages and time conversation search on it.

    uv run python scripts/bench_search.py [--messages 1000000] [--json] [--keep PATH]
    uv run python scripts/bench_search.py --cache /tmp/atlas-bench-search-1m.db

With `--cache PATH` the store is built there once and reused by later runs with the same
`--messages` (a sidecar `PATH.json` says what it holds); the appends a run makes are deleted at
its end, so every run searches the same messages.

Messages are made from a fixed-seed vocabulary with a Zipf-like spread of words (so some words
are in a large share of messages), and carry a few planted terms: a rare word, a rare CJK
phrase and a common word. Prints `name: value` lines (or one JSON object): the bulk insert rate
(rows in batches, then both FTS5 indexes filled behind them, as the store does), the rate of
single appends through the store, the file size, and p50/p95 latency of the tool's search
(find the conversations, fetch their matching messages, render the answer) for a rare term, a
common term and a CJK term. Then the write side of issue 34: the latency of single appends to
another conversation alone, and while common-term searches run back to back (a search runs on
its own read connection, never on the writer's thread).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.providers.base import Message
from atlas.store.conversations import ConversationStore, MessageFilter
from atlas.store.message_index import index_pending_messages
from atlas.tools.conversations import Search, discover, render_discovery

SEED = 20240501
MESSAGES_PER_CONVERSATION = 50
BATCH = 10_000
RARE_TERM = "zyxquartzite"  # planted in RARE_PLANTED messages, spread evenly
RARE_PLANTED = 10
CJK_TERM = "東京タワー"
CJK_PLANTED = 20
COMMON_TERM = "deployment"  # planted in COMMON_SHARE of messages
COMMON_SHARE = 0.05
SEARCH_RUNS = 20
APPENDS = 2_000
APPENDS_DURING = 200  # one every APPEND_GAP seconds while searches run
APPEND_GAP = 0.01
_COMMON_TEXT = (
    "the be to of and a in that have it for not on with he as you do at this but his by from "
    "they we say her she or an will my one all would there their what so up out if about who "
    "get which go me when make can like time no just him know take people into year your good "
    "some could them see other than then now look only come its over think also back after use "
    "two how our work first well way even new want because any these give day most us is are "
    "was were been has had did said could should might must shall may file server test build "
    "meeting email invoice report client budget schedule review draft code error fix update"
)
COMMON_WORDS = tuple(dict.fromkeys(_COMMON_TEXT.split()))


def _vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "bar", "con", "dis", "pro"]
    words = set(COMMON_WORDS)
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    # The common words rank first (frequent), the made-up ones after them in a seeded order.
    made_up = sorted(words - set(COMMON_WORDS))
    rng.shuffle(made_up)
    return [*COMMON_WORDS, *made_up]


def _messages(count: int, rng: random.Random) -> list[tuple[int, str, str, str]]:
    """(conversation number, role, content, created_at) for every message, oldest first."""
    vocabulary = _vocabulary(rng)
    # Zipf (s = 1), cumulated once: choices() would otherwise add them up on every call.
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
    start = datetime(2024, 1, 1, tzinfo=UTC)
    step = timedelta(days=365) / max(count, 1)
    rare_every = max(1, count // RARE_PLANTED)
    cjk_every = max(1, count // CJK_PLANTED)
    rows = []
    for n in range(count):
        words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(5, 60))
        if rng.random() < COMMON_SHARE:
            words.insert(rng.randrange(len(words) + 1), COMMON_TERM)
        if n % rare_every == rare_every // 2:
            words.insert(rng.randrange(len(words) + 1), RARE_TERM)
        if n % cjk_every == cjk_every // 3:
            words.append(f"明日は{CJK_TERM}で会議があります")
        stamp = (start + step * n).isoformat(timespec="microseconds")
        role = "user" if n % 2 == 0 else "assistant"
        rows.append((n // MESSAGES_PER_CONVERSATION, role, " ".join(words), stamp))
    return rows


async def _fill(store: ConversationStore, rows: list[tuple[int, str, str, str]]) -> float:
    """Insert every row in batches, one transaction each; return the seconds it took."""
    conversations = rows[-1][0] + 1 if rows else 0

    def insert_conversations(db: Any) -> None:
        with db.atomic():
            db.conn.executemany(
                "INSERT INTO conversations (id, bot, channel, chat, thread, user, kind, "
                "created_at, updated_at) VALUES (?, 'bench', 'telegram', ?, '', '', "
                "'conversation', ?, ?)",
                [(c + 1, f"chat{c}", "", "") for c in range(conversations)],
            )

    def insert_batch(db: Any, batch: list[tuple[int, str, str, str]]) -> None:
        with db.atomic():
            db.conn.executemany(
                "INSERT INTO messages (conversation_id, role, content, kind, created_at) "
                "VALUES (?, ?, ?, 'message', ?)",
                [(c + 1, role, content, at) for c, role, content, at in batch],
            )

    def stamp_conversations(db: Any) -> None:
        with db.atomic():
            db.execute(
                "UPDATE conversations SET created_at = (SELECT MIN(created_at) FROM messages "
                "WHERE conversation_id = conversations.id), updated_at = (SELECT "
                "MAX(created_at) FROM messages WHERE conversation_id = conversations.id)"
            )

    await store.db.call(insert_conversations)
    began = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        batch = rows[i : i + BATCH]
        await store.db.call(lambda db, batch=batch: insert_batch(db, batch))
    seconds = time.perf_counter() - began
    await store.db.call(stamp_conversations)
    return seconds


APPENDS_CHAT = "appends"  # the other conversation the write figures append to


async def _append_rate(store: ConversationStore, count: int) -> float:
    """Messages per second through `ConversationStore.append` (one transaction each)."""
    conversation = await store.conversation("telegram", APPENDS_CHAT, bot="bench")
    began = time.perf_counter()
    for n in range(count):
        await store.append(conversation.id, Message("user", f"appended message {n}"))
    return count / (time.perf_counter() - began)


def _percentiles(timings: list[float]) -> dict[str, float]:
    timings = sorted(timings)
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.95))], 2),
        "max_ms": round(timings[-1], 2),
    }


async def _append_latency(store: ConversationStore, count: int) -> list[float]:
    """Milliseconds of each of `count` single appends to another conversation, APPEND_GAP
    apart (each waited for, as a turn waits for its message to be stored)."""
    conversation = await store.conversation("telegram", APPENDS_CHAT, bot="bench")
    timings = []
    for n in range(count):
        began = time.perf_counter()
        await store.append(conversation.id, Message("user", f"appended during a search {n}"))
        timings.append((time.perf_counter() - began) * 1000)
        await asyncio.sleep(APPEND_GAP)
    return timings


async def _appends_during_searches(store: ConversationStore, query: str) -> dict[str, Any]:
    """Append latency alone, then while `query` is searched back to back."""
    alone = await _append_latency(store, APPENDS_DURING)
    searching = True
    searches = 0

    async def search_loop() -> None:
        nonlocal searches
        while searching:
            await _latency(store, query, 1)
            searches += 1

    loop = asyncio.create_task(search_loop())
    try:
        during = await _append_latency(store, APPENDS_DURING)
    finally:
        searching = False
        await loop
    return {
        "alone": _percentiles(alone),
        "during": _percentiles(during),
        "searches_meanwhile": searches,
    }


async def _drop_appends(store: ConversationStore) -> None:
    """The messages this run appended, deleted: a cached store stays as it was built."""

    def drop(db: Any) -> None:
        with db.atomic():
            db.execute(
                "DELETE FROM messages WHERE conversation_id IN (SELECT id FROM conversations "
                "WHERE chat = ?)",
                [APPENDS_CHAT],
            )

    await store.db.call(drop)
    await store.db.call(index_pending_messages)


async def _latency(store: ConversationStore, query: str, runs: int) -> dict[str, Any]:
    from atlas.tools.conversations import BotStore

    where = [BotStore("bench", store, qualify=False)]
    search = Search(query=query, where=MessageFilter())
    timings, found = [], []
    for _ in range(runs):
        began = time.perf_counter()
        found, _ = await discover(where, search)
        await render_discovery(found, search)
        timings.append((time.perf_counter() - began) * 1000)
    timings.sort()
    return {
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.95))], 1),
        "conversations_found": len(found),
    }


def _cached(path: Path, messages: int) -> dict[str, Any] | None:
    """The build figures of a store cached at `path` with `messages` messages, if it is."""
    sidecar = path.with_name(path.name + ".json")
    if not path.exists() or not sidecar.exists():
        return None
    built = json.loads(sidecar.read_text())
    return built if built.get("messages") == messages and built.get("seed") == SEED else None


async def bench(
    messages: int, path: Path, *, built: dict[str, Any] | None = None, sidecar: Path | None = None
) -> dict[str, Any]:
    """Build the store at `path` (unless `built` says it is there already, cached), then
    measure it; with `sidecar`, what was built is written there for the next run."""
    async with ConversationStore(path) as store:
        if built is None:
            built = await _build(store, messages)
            if sidecar is not None:
                text = json.dumps({"messages": messages, "seed": SEED, **built})
                await asyncio.to_thread(sidecar.write_text, text)
        else:
            built = {**built, "cached": True}
        figures = await _measure(store, path)
    return {"messages": messages, **built, **figures}


async def _build(store: ConversationStore, messages: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    began = time.perf_counter()
    rows = _messages(messages, rng)
    generated = time.perf_counter() - began
    insert_seconds = await _fill(store, rows)
    del rows
    began = time.perf_counter()
    await store.db.call(index_pending_messages)  # as the store's upkeep would, in steps
    index_seconds = time.perf_counter() - began
    return {
        "generate_seconds": round(generated, 1),
        "insert_seconds": round(insert_seconds, 1),
        "index_seconds": round(index_seconds, 1),
        "insert_rate_per_s": round(messages / (insert_seconds + index_seconds)),
    }


async def _measure(store: ConversationStore, path: Path) -> dict[str, Any]:
    """The figures of one run over a built store: search latency, then the writes."""
    common_count = await store.db.call(
        lambda db: db.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", [COMMON_TERM]
        ).fetchone()[0]
    )
    rare = await _latency(store, RARE_TERM, SEARCH_RUNS)
    common = await _latency(store, COMMON_TERM, SEARCH_RUNS)
    cjk = await _latency(store, CJK_TERM, SEARCH_RUNS)
    await store.db.call(lambda db: db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    size = (await asyncio.to_thread(path.stat)).st_size
    append_rate = await _append_rate(store, APPENDS)
    writes = await _appends_during_searches(store, COMMON_TERM)
    await _drop_appends(store)
    messages = await store.db.call(
        lambda db: db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    )
    return {
        "append_rate_per_s": round(append_rate),
        "file_size_mb": round(size / 1_000_000, 1),
        "bytes_per_message": round(size / max(messages, 1)),
        "rare_term": RARE_TERM,
        "rare_p50_ms": rare["p50_ms"],
        "rare_p95_ms": rare["p95_ms"],
        "rare_conversations_found": rare["conversations_found"],
        "common_term": COMMON_TERM,
        "common_term_messages": common_count,
        "common_p50_ms": common["p50_ms"],
        "common_p95_ms": common["p95_ms"],
        "cjk_term": CJK_TERM,
        "cjk_p50_ms": cjk["p50_ms"],
        "cjk_p95_ms": cjk["p95_ms"],
        "append_alone_p50_ms": writes["alone"]["p50_ms"],
        "append_alone_p95_ms": writes["alone"]["p95_ms"],
        "append_alone_max_ms": writes["alone"]["max_ms"],
        "append_during_search_p50_ms": writes["during"]["p50_ms"],
        "append_during_search_p95_ms": writes["during"]["p95_ms"],
        "append_during_search_max_ms": writes["during"]["max_ms"],
        "searches_during_appends": writes["searches_meanwhile"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to insert")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", type=Path, help="build the store at this path and keep it")
    parser.add_argument("--cache", type=Path, help="build the store here once; later runs reuse it")
    args = parser.parse_args()
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.cache:
        built = _cached(args.cache, args.messages)
        if built is None:  # none yet, or another size or seed: built again
            for stale in (
                args.cache,
                *(args.cache.with_name(args.cache.name + x) for x in ("-wal", "-shm")),
            ):
                stale.unlink(missing_ok=True)
        sidecar = args.cache.with_name(args.cache.name + ".json")
        figures = asyncio.run(bench(args.messages, args.cache, built=built, sidecar=sidecar))
    elif args.keep:
        if args.keep.exists():
            parser.error(f"{args.keep} exists; give a new path")
        figures = asyncio.run(bench(args.messages, args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="atlas-bench-") as folder:
            figures = asyncio.run(bench(args.messages, Path(folder) / "conversations.db"))
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
