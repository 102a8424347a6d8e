"""The same search on both engines: a bot's SQLite file and the home's PostgreSQL database.

    uv run python scripts/bench_store_engines.py [--messages 100000] [--url postgresql://…]

Fills a SQLite conversation store as scripts/bench_search.py does (same seed, same planted
terms), copies it to PostgreSQL with `atlas store migrate`'s copy (timed), then runs the same
queries on both (`match_conversations` for the conversations, then `matching_messages` in the
best one, as the search tool does) and prints p50 per engine and whether both found the same
conversations with as many matching messages each (ranking aside: bm25 and ts_rank order
equally good matches differently). Without --url it starts a throwaway server (tests/postgres_cluster.py).
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


def _query(text: str) -> TextQuery:
    query = TextQuery.build(text, "trigram" if has_cjk(text) else "words")
    assert query is not None
    return query


async def _search(engine: ConversationEngine, text: str) -> float:
    """The search tool's two steps: the best conversations, then the matches in the first."""
    query = _query(text)
    began = time.perf_counter()
    found = await engine.match_conversations(query, MessageFilter(), sort="relevance", limit=5)
    if found:
        where = MessageFilter(conversation_id=found[0].conversation.id)
        await engine.matching_messages(query, where, limit=10)
    return (time.perf_counter() - began) * 1000


async def _every_match(engine: ConversationEngine, text: str) -> set[tuple[int, int]]:
    """Every matching conversation and its number of matching messages (ranking aside)."""
    found = await engine.match_conversations(
        _query(text), MessageFilter(), sort="newest", limit=1_000_000
    )
    return {(m.conversation.id, m.hits) for m in found}


async def _p50(engine: ConversationEngine, text: str) -> float:
    return statistics.median([await _search(engine, text) for _ in range(RUNS)])


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
                # A fresh database numbers the copied conversations as the file did.
                on_sqlite, on_pg = await _every_match(sqlite, text), await _every_match(pg, text)
                results[text] = {
                    "sqlite_p50_ms": round(await _p50(sqlite, text), 1),
                    "postgres_p50_ms": round(await _p50(pg, text), 1),
                    "conversations_sqlite": len(on_sqlite),
                    "conversations_postgres": len(on_pg),
                    "same_matches": on_sqlite == on_pg,
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
