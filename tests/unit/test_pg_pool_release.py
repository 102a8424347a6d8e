"""The store's pool (atlas/store/pg/server.py) returns a connection without asyncpg's reset round
trip (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`, a quarter of a turn's
round trips on PostgreSQL, issue 36), and still never hands out a connection inside a
transaction someone left open."""

from __future__ import annotations

from atlas.store.pg.server import PgServer


async def test_a_released_connection_costs_no_round_trip(postgres_url: str) -> None:
    server = PgServer(postgres_url, max_connections=1)  # one connection: the same both times
    await server.open()
    try:
        sent: list[str] = []
        async with server.pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
            await conn.execute("SELECT 1")
        async with server.pool.acquire() as conn:
            await conn.execute("SELECT 2")
        assert sent == ["SELECT 1", "SELECT 2"]
    finally:
        await server.close()


async def test_a_transaction_left_open_is_rolled_back_on_release(postgres_url: str) -> None:
    server = PgServer(postgres_url, max_connections=1)
    await server.open()
    try:
        async with server.pool.acquire() as conn:
            await conn.execute("CREATE TABLE left_open (n int)")
            await conn.execute("BEGIN")
            await conn.execute("INSERT INTO left_open VALUES (1)")
        async with server.pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM left_open") == 0
    finally:
        await server.close()
