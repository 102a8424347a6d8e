"""pytest fixtures for PostgreSQL tests (registered in tests/conftest.py as a plugin).

`postgres_url`: a fresh, empty database on this process's throwaway cluster
(tests/postgres_cluster.py). The cluster starts once per pytest process, on the first test that
asks, so a run without PostgreSQL tests pays nothing. Tests using it carry the `postgres`
marker (added here) and are skipped only where PostgreSQL's binaries are not installed.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.postgres_cluster import SUPERUSER, Cluster, find_postgres_bin, start_cluster

_database_numbers = itertools.count()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    cluster = start_cluster(bin_dir)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: Cluster) -> str:
    """A new database of its own for this test (CREATE DATABASE copies template1: fast). Made
    with the `createdb` client, not asyncpg: an async fixture may ask for this one, inside a
    running event loop."""
    name = f"t{os.getpid()}_{next(_database_numbers)}"
    subprocess.run(
        [
            str(postgres_cluster.bin_dir / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(postgres_cluster.port),
            "-U",
            SUPERUSER,
            name,
        ],
        check=True,
        capture_output=True,
    )
    return postgres_cluster.url(name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs the server is marked `postgres` (`-m "not postgres"` skips them)."""
    for item in items:
        if "postgres_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
