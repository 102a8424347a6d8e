"""The same search on both engines: a bot's SQLite file and the home's PostgreSQL database.

    uv run python scripts/bench_store_engines.py [--messages 100000] [--url postgresql://…]

Fills a SQLite conversation store as scripts/bench_search.py does (same seed, same planted
terms), copies it to PostgreSQL with `atlas store migrate`'s copy (timed), then runs the same
queries on both (`match_conversations` for the conversations, then `matching_messages` in the
best one, as the search tool does) and prints p50 per engine and whether both found the same
conversations with as many matching messages each (ranking aside: bm25 and ts_rank order
equally good matches differently). Without --url it starts a throwaway server (tests/postgres_cluster.py).
Progress goes to stderr with the seconds each phase took (fill, SQLite's indexes, copy);
`--explain` prints PostgreSQL's plan (EXPLAIN ANALYZE) of each query's two statements.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
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
from tests.postgres_cluster import database_for_script

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


def _progress(what: str, began: float) -> float:
    """Say on stderr how long a phase took; its length in seconds, one decimal."""
    seconds = round(time.perf_counter() - began, 1)
    print(f"{time.strftime('%H:%M:%S')} {what}: {seconds} s", file=sys.stderr, flush=True)
    return seconds


class _Recording:
    """A pool or connection that notes each query it fetches, then runs it."""

    def __init__(self, inner: Any, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._inner, self._statements = inner, statements

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fetch(self, sql: str, *args: Any) -> Any:
        self._statements.append((sql, args))
        return await self._inner.fetch(sql, *args)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[_Recording]:
        async with self._inner.acquire() as conn:
            yield _Recording(conn, self._statements)


async def _explain(server: PgServer, pg: PgConversationStore, text: str) -> None:
    """EXPLAIN ANALYZE of the statements the search tool's two steps run, on stderr."""
    statements: list[tuple[str, tuple[Any, ...]]] = []
    pool = server.pool
    server._pool = _Recording(pool, statements)  # type: ignore[assignment]
    try:
        await _search(pg, text)
    finally:
        server._pool = pool
    for sql, args in statements:
        if "conversations WHERE id = ANY" in sql:
            continue  # the found conversations' rows, by primary key
        rows = await pool.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
        plan = "\n".join(row[0] for row in rows)
        print(f"--- {text}:\n{sql}\n{plan}", file=sys.stderr, flush=True)


async def bench(messages: int, url: str, folder: Path, explain: bool) -> dict[str, Any]:
    path = folder / "conversations.db"
    results: dict[str, Any] = {"messages": messages}
    async with ConversationStore(path) as store:
        began = time.perf_counter()
        rows = _messages(messages, random.Random(SEED))
        results["make_seconds"] = _progress("messages made", began)
        began = time.perf_counter()
        await _fill(store, rows)
        results["fill_seconds"] = _progress("SQLite filled (indexed behind the writes)", began)
        del rows
        began = time.perf_counter()
        await store.db.call(index_pending_messages)
        results["sqlite_index_seconds"] = _progress(
            "the rest of SQLite's FTS5 indexes filled", began
        )
    async with PgServer(url, idle_in_transaction=None) as server:  # copy_bot: one long copy
        async with server.pool.acquire() as conn:
            began = time.perf_counter()
            await copy_bot(conn, "bench", path)
            results["copy_seconds"] = _progress("copied to PostgreSQL", began)
            # As autovacuum soon would: the GIN indexes' pending entries merged (else every
            # search reads the pending list, 3 MB after the copy), the planner's statistics.
            began = time.perf_counter()
            await conn.execute("VACUUM ANALYZE")
            results["vacuum_seconds"] = _progress("VACUUM ANALYZE", began)
        pg = PgConversationStore(server, "bench")
        async with ConversationStore(path) as sqlite:
            for text in QUERIES:
                if explain:
                    await _explain(server, pg, text)
                # A fresh database numbers the copied conversations as the file did.
                on_sqlite, on_pg = await _every_match(sqlite, text), await _every_match(pg, text)
                results[text] = {
                    "sqlite_p50_ms": round(await _p50(sqlite, text), 1),
                    "postgres_p50_ms": round(await _p50(pg, text), 1),
                    "conversations_sqlite": len(on_sqlite),
                    "conversations_postgres": len(on_pg),
                    "same_matches": on_sqlite == on_pg,
                }
                print(f"{time.strftime('%H:%M:%S')} {text}: {results[text]}", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway one)")
    parser.add_argument(
        "--explain", action="store_true", help="print PostgreSQL's plans (EXPLAIN ANALYZE)"
    )
    args = parser.parse_args()
    with database_for_script(args.url) as url, tempfile.TemporaryDirectory() as folder:
        results = asyncio.run(bench(args.messages, url, Path(folder), args.explain))
    for key, value in results.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
