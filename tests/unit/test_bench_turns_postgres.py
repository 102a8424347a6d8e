"""scripts/bench_turns.py on PostgreSQL (issue 36): the server's CPU is read apart from the
daemon's, over every process of the cluster (the postmaster and its backends), so a query's
work shows in it, after its backend has ended too."""

from __future__ import annotations

import subprocess

from scripts.bench_turns import cluster_cpu_seconds
from tests.postgres_cluster import Cluster

# Work done by a backend, not by the client: a few hundred ms of CPU on the server.
BUSY_QUERY = "SELECT count(*) FROM generate_series(1, 3000000) AS s WHERE s % 7 = 0"


def test_the_cluster_cpu_counts_its_backends_work(postgres_cluster: Cluster) -> None:
    before = cluster_cpu_seconds(postgres_cluster)
    subprocess.run(
        [str(postgres_cluster.bin_dir / "psql"), postgres_cluster.url(), "-c", BUSY_QUERY],
        check=True,
        capture_output=True,
    )
    # psql's backend has ended: its CPU is the postmaster's reaped children's now.
    assert cluster_cpu_seconds(postgres_cluster) - before > 0.1
