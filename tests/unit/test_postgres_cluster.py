"""The throwaway PostgreSQL cluster the `postgres` tests share (tests/postgres_cluster.py)."""

from __future__ import annotations

import asyncpg
import pytest

from tests.postgres_cluster import Cluster


async def test_each_test_gets_an_empty_database_of_its_own(
    postgres_url: str, postgres_cluster: Cluster
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        tables = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables == 0
        assert await conn.fetchval("SHOW server_encoding") == "UTF8"
        # Loopback only: the conftest's network guard would refuse anything else.
        assert postgres_url.startswith(f"postgresql://atlas@127.0.0.1:{postgres_cluster.port}/")
    finally:
        await conn.close()


def test_a_test_using_the_server_is_marked(
    postgres_cluster: Cluster, request: pytest.FixtureRequest
) -> None:
    # Marked by tests/postgres_fixtures.py, so `-m "not postgres"` leaves such tests out.
    assert request.node.get_closest_marker("postgres") is not None
