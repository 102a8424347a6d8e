"""The throwaway PostgreSQL cluster the `postgres` tests share (tests/postgres_cluster.py)."""

from __future__ import annotations

import socket
import subprocess

import asyncpg
import pytest

from tests.postgres_cluster import (
    OWNER_FILE,
    Cluster,
    find_postgres_bin,
    start_cluster,
    sweep_orphans,
)


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


def test_a_cluster_whose_maker_died_is_taken_down_by_the_next_start() -> None:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed")
    orphan = start_cluster(bin_dir)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid nobody has now: the maker as a killed pytest leaves it
    (orphan.data_dir.parent / OWNER_FILE).write_text(str(gone.pid))
    mine = start_cluster(bin_dir)  # sweeps first
    try:
        assert not orphan.data_dir.parent.exists()
        assert mine.data_dir.exists()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", orphan.port), timeout=2).close()
        assert sweep_orphans(bin_dir) == []  # a live maker's cluster is left alone
    finally:
        mine.stop()
