"""The same search on both engines: a bot's SQLite file and the home's PostgreSQL database.

    uv run python scripts/bench_store_engines.py [--messages 100000] [--url postgresql://…]

Fills a SQLite conversation store as scripts/bench_search.py does (same seed, same planted
terms), copies it to PostgreSQL with `atlas store migrate`'s copy (timed), then runs the same
queries on both (`match_conversations` for the conversations, then `matching_messages` in the
best one, as the search tool does) and prints p50 per engine and whether both found the same
conversations. Without --url it starts a throwaway server (tests/postgres_cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.store.conversations import ConversationStore
from atlas.store.engine import ConversationEngine
from atlas.store.message_index import index_pending_messages
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.migrate import copy_bot
from atlas.store.pg.server import PgServer
from atlas.store.search import MessageFilter, TextQuery, has_cjk
from scripts.bench_search import CJK_TERM, COMMON_TERM, RARE_TERM, SEED, _fill, _messages

RUNS = 10
QUERIES = (RARE_TERM, COMMON_TERM, CJK_TERM, "budget review", "deploy")


async def _search(engine: ConversationEngine, text: str) -> tuple[float, list[int]]:
    index = "trigram" if has_cjk(text) else "words"
    query = TextQuery.build(text, index)  # type: ignore[arg-type]
    assert query is not None
    began = time.perf_counter()
    found = await engine.match_conversations(query, MessageFilter(), sort="relevance", limit=5)
    if found:
        where = MessageFilter(conversation_id=found[0].conversation.id)
        await engine.matching_messages(query, where, limit=10)
    return (time.perf_counter() - began) * 1000, sorted(m.conversation.id for m in found)


async def _timed(engine: ConversationEngine, text: str) -> tuple[float, list[int]]:
    timings, found = [], []
    for _ in range(RUNS):
        ms, found = await _search(engine, text)
        timings.append(ms)
    return statistics.median(timings), found


async def bench(messages: int, url: str, folder: Path) -> dict[str, Any]:
    path = folder / "conversations.db"
    async with ConversationStore(path) as store:
        await _fill(store, _messages(messages, random.Random(SEED)))
        await store.db.call(index_pending_messages)
    results: dict[str, Any] = {"messages": messages}
    async with PgServer(url) as server:
        async with server.pool.acquire() as conn:
            began = time.perf_counter()
            await copy_bot(conn, "bench", path)
            results["copy_seconds"] = round(time.perf_counter() - began, 1)
            await conn.execute("ANALYZE")
        pg = PgConversationStore(server, "bench")
        async with ConversationStore(path) as sqlite:
            for text in QUERIES:
                sqlite_ms, sqlite_found = await _timed(sqlite, text)
                pg_ms, pg_found = await _timed(pg, text)
                # A fresh database numbers the copied conversations as the file did.
                same = sqlite_found == pg_found
                results[text] = {
                    "sqlite_p50_ms": round(sqlite_ms, 1),
                    "postgres_p50_ms": round(pg_ms, 1),
                    "conversations": len(sqlite_found),
                    "same_conversations": same,
                }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway one)")
    args = parser.parse_args()
    cluster = None
    url = args.url
    if url is None:
        from tests.postgres_cluster import find_postgres_bin, start_cluster

        bin_dir = find_postgres_bin()
        if bin_dir is None:
            sys.exit("PostgreSQL is not installed: give --url")
        cluster = start_cluster(bin_dir)
        url = cluster.url()
    try:
        with tempfile.TemporaryDirectory() as folder:
            results = asyncio.run(bench(args.messages, url, Path(folder)))
    finally:
        if cluster is not None:
            cluster.stop()
    for key, value in results.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
