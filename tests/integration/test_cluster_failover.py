"""Failover between node processes on a real PostgreSQL server: kill -9 one of two demo nodes
(atlas/cluster/demo_node.py, short timings); its bots are taken over under a newer epoch and
no send with a stale epoch lands. Figures with the default timing: scripts/bench_failover.py."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from atlas.cluster.demo_node import prepare, stale_sends
from atlas.store.pg.server import apply_schema

BOTS = ["b1", "b2", "b3", "b4"]
LEASE, HEARTBEAT = 1.5, 0.3


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started: dict[str, subprocess.Popen[bytes]] = {}
    yield started
    for proc in started.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _start(url: str, name: str, logs: Path) -> subprocess.Popen[bytes]:
    log = (logs / f"{name}.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atlas.cluster.demo_node",
            "--url",
            url,
            "--name",
            name,
            "--bots",
            ",".join(BOTS),
            "--lease",
            str(LEASE),
            "--heartbeat",
            str(HEARTBEAT),
            "--send-every",
            "0.05",
        ],
        stdout=log,
        stderr=log,
    )


async def _until(check: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)


async def _holders(conn: asyncpg.Connection) -> dict[str, tuple[str, int]]:
    rows = await conn.fetch(
        "SELECT substr(resource, 5) AS bot, holder, epoch FROM leases "
        "WHERE holder IS NOT NULL AND expires_at > clock_timestamp() "
        "AND starts_with(resource, 'bot:')"
    )
    return {row["bot"]: (row["holder"], int(row["epoch"])) for row in rows}


async def _two_nodes_sharing(
    url: str, processes: dict[str, subprocess.Popen[bytes]], logs: Path
) -> asyncpg.Connection:
    conn = await asyncpg.connect(url)
    await apply_schema(conn, "the test database")
    await prepare(conn)

    async def split_two_two() -> bool:
        owners = [holder for holder, _ in (await _holders(conn)).values()]
        return sorted(owners) == ["n1", "n1", "n2", "n2"]

    for name in ("n1", "n2"):
        processes[name] = _start(url, name, logs)
    await _until(split_two_two, 20, "a 2/2 split")
    await asyncio.sleep(0.5)  # both send for a while
    return conn


async def _taken_over_by_n1(conn: asyncpg.Connection, before: dict[str, int]) -> None:
    async def taken_over() -> bool:
        now = await _holders(conn)
        return all(now.get(bot, ("", 0)) == ("n1", epoch + 1) for bot, epoch in before.items())

    await _until(taken_over, LEASE * 4 + 5, "n1 taking over n2's bots")
    await _until(
        lambda: conn.fetchval(
            "SELECT count(DISTINCT bot) = 4 FROM demo_sends WHERE node = 'n1' "
            "AND sent_at > (SELECT max(at) FROM demo_events WHERE kind = 'gained')"
        ),
        10,
        "n1 sending for all four bots",
    )


async def _held_by_n2(conn: asyncpg.Connection) -> dict[str, int]:
    return {bot: epoch for bot, (holder, epoch) in (await _holders(conn)).items() if holder == "n2"}


async def test_a_killed_nodes_bots_are_taken_over_and_no_stale_send_lands(
    postgres_url: str, processes: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    conn = await _two_nodes_sharing(postgres_url, processes, tmp_path)
    try:
        before = await _held_by_n2(conn)
        processes["n2"].send_signal(signal.SIGKILL)
        processes["n2"].wait()
        await _taken_over_by_n1(conn, before)
        assert await conn.fetchval("SELECT count(*) FROM demo_sends WHERE node = 'n2'") > 0
        assert await stale_sends(conn) == 0
    finally:
        await conn.close()


async def test_a_node_paused_past_its_lease_sends_nothing_when_it_wakes(
    postgres_url: str, processes: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    conn = await _two_nodes_sharing(postgres_url, processes, tmp_path)
    try:
        before = await _held_by_n2(conn)
        paused_at = await conn.fetchval("SELECT clock_timestamp()")
        processes["n2"].send_signal(signal.SIGSTOP)
        await _taken_over_by_n1(conn, before)
        processes["n2"].send_signal(signal.SIGCONT)

        async def n2_gave_up() -> bool:
            lost = await conn.fetchval(
                "SELECT count(*) FROM demo_events WHERE node = 'n2' AND kind = 'lost' AND at > $1",
                paused_at,
            )
            return int(lost) == len(before)

        await _until(n2_gave_up, 10, "n2's on_lost after waking")
        # Under its old epochs (it may take bots again under new ones since).
        late = await conn.fetchval(
            "SELECT count(*) FROM demo_sends WHERE node = 'n2' AND sent_at > $1 "
            "AND (bot, epoch) IN (SELECT * FROM unnest($2::text[], $3::bigint[]))",
            paused_at,
            list(before),
            list(before.values()),
        )
        assert late == 0
        assert await stale_sends(conn) == 0
    finally:
        await conn.close()
