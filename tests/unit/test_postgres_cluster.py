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


def test_the_cluster_tests_are_marked(request: pytest.FixtureRequest) -> None:
    # A test that asks for the server carries the `postgres` marker (tests/postgres_fixtures.py).
    marked = [item for item in request.session.items if item.get_closest_marker("postgres")]
    assert any(item.name.startswith("test_each_test_gets") for item in marked)
