"""The run lock (atlas/cluster/run_lock.py): nodes share it, a plain `atlas run` holds it alone,
and whoever is refused is told what runs. Two RunLocks on one database stand for two processes
(each takes its own connection, so its own session)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from atlas.cluster import run_lock
from atlas.cluster.run_lock import RUN_LOCK, RunLock
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


async def _cut_lock_connections(url: str) -> int:
    """What a server restart or a cut network does to the lock's holders: their sessions end."""
    admin = await asyncpg.connect(url)
    try:
        return len(
            await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_locks "
                "WHERE locktype = 'advisory' AND objid::bigint = $1",
                RUN_LOCK,
            )
        )
    finally:
        await admin.close()


class ServerAway(PgServer):
    """The store out of reach while `away` is set: connecting fails as an unreachable server's
    does, so a lock that lost its connection must wait for it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.away = False
        self.refused = 0

    async def connect_alone(self) -> asyncpg.Connection:
        if self.away:
            self.refused += 1
            raise self._unreachable(OSError("connection refused"))
        return await super().connect_alone()


async def _until(predicate: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_a_lock_whose_connection_ends_is_taken_again(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_lock, "REGAIN_PAUSE", 0.05)
    server = ServerAway(postgres_url)
    lost: list[str] = []
    plain, second = RunLock(server, on_lost=lost.append), RunLock(PgServer(postgres_url))
    try:
        await plain.take(None)
        server.away = True  # the server is gone for a moment: tries again until it is back
        assert await _cut_lock_connections(postgres_url) == 1
        await _until(lambda: server.refused >= 2)
        server.away = False
        await _until(lambda: plain.regained == 1)
        with pytest.raises(AtlasError, match=r"a plain `atlas run` \(without --node\) of this"):
            await second.take(None)  # held again: a second daemon is still refused
        assert lost == []
    finally:
        for lock in (plain, second):
            await lock.release()


async def test_a_lock_another_run_took_meanwhile_stops_this_one(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_lock, "REGAIN_PAUSE", 0.05)
    server = ServerAway(postgres_url)
    lost: list[str] = []
    node, plain = RunLock(server, on_lost=lost.append), RunLock(PgServer(postgres_url))
    try:
        await node.take("n1")
        server.away = True
        await _cut_lock_connections(postgres_url)
        await _until(lambda: server.refused >= 1)
        await plain.take(None)  # a plain daemon started in the gap: it serves every bot now
        server.away = False
        await _until(lambda: bool(lost))
        assert lost[0].startswith("this process lost the home's run lock")
        assert "a plain `atlas run` (without --node)" in lost[0]
        assert node.regained == 0
    finally:
        for lock in (node, plain):
            await lock.release()


async def test_a_released_lock_is_not_taken_again(postgres_url: str) -> None:
    lost: list[str] = []
    lock = RunLock(PgServer(postgres_url), on_lost=lost.append)
    await lock.take(None)
    await lock.release()
    await asyncio.sleep(0.1)
    assert lock.regained == 0 and lost == []
    assert await _cut_lock_connections(postgres_url) == 0


async def test_the_lock_session_is_dropped_by_the_server_when_its_client_vanishes(
    postgres_url: str,
) -> None:
    """A machine that vanished without closing (power lost) must not hold the lock for the
    system's two hours of TCP keepalive: the server probes the session's client soon."""
    lock = RunLock(PgServer(postgres_url))
    await lock.take(None)
    try:
        assert lock._conn is not None
        settings = {
            name: await lock._conn.fetchval(f"SHOW {name}")
            for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")
        }
        assert settings == {
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
        }
    finally:
        await lock.release()
