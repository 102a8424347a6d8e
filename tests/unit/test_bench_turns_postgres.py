"""scripts/bench_turns.py on PostgreSQL (issue 36): the server's CPU is read apart from the
daemon's, over every process of the cluster (the postmaster and its backends), so a query's
work shows in it, after its backend has ended too."""

from __future__ import annotations

import subprocess
import time

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
    # psql's backend has ended: its CPU is a zombie's until the postmaster reaps it, then the
    # postmaster's reaped children's. A busy machine may delay both a moment.
    deadline = time.monotonic() + 5
    while (grown := cluster_cpu_seconds(postgres_cluster) - before) <= 0.1:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert grown > 0.1
