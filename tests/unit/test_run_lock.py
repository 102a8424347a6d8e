"""The run lock (atlas/cluster/run_lock.py): nodes share it, a plain `atlas run` holds it alone,
and whoever is refused is told what runs. Two RunLocks on one database stand for two processes
(each takes its own connection, so its own session)."""

from __future__ import annotations

import pytest

from atlas.cluster.run_lock import RunLock
from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer


async def test_nodes_share_it_and_a_plain_run_is_refused_beside_them(postgres_url: str) -> None:
    server = PgServer(postgres_url)
    n1, n2, plain = RunLock(server), RunLock(server), RunLock(server)
    try:
        await n1.take("n1")
        await n2.take("n2")
        with pytest.raises(AtlasError, match=r"a node \(`atlas run --node`\) of this home"):
            await plain.take(None)
        await n1.release()
        await n2.release()
        await plain.take(None)  # released: nothing holds it any more
    finally:
        for lock in (n1, n2, plain):
            await lock.release()


async def test_a_plain_run_refuses_a_node_and_another_plain_run(postgres_url: str) -> None:
    server = PgServer(postgres_url)
    plain, node, second = RunLock(server), RunLock(server), RunLock(server)
    try:
        await plain.take(None)
        with pytest.raises(AtlasError, match=r"`atlas run --node n1` beside it") as refused:
            await node.take("n1")
        assert "a plain `atlas run` (without --node)" in str(refused.value)
        with pytest.raises(AtlasError, match=r"a plain `atlas run` \(without --node\) of this"):
            await second.take(None)
    finally:
        for lock in (plain, node, second):
            await lock.release()
