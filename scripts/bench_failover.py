"""Failover of bots between nodes: kill -9 and pause nodes, measure takeover, count violations.

    uv run python scripts/bench_failover.py [--kills 6] [--lease 10] [--heartbeat 2]

Starts `--nodes` demo node processes (atlas/cluster/demo_node.py) sharing `--bots` fake bots
on one PostgreSQL server (a throwaway one unless --url). Then, `--kills` times: SIGKILL a
node chosen at random, measure the time until each of its bots is held again under a newer
epoch (the takeover), restart it, wait `--interval` seconds. Then SIGSTOP a node past its
lease, SIGCONT it, and check that it sent nothing more. Throughout, every 100 ms: no bot
believed held by two running nodes (`demo_holding`). At the end: sends with a stale epoch that
landed (atlas.cluster.demo_node.STALE_SENDS), which must be 0.

`--unfenced` runs the nodes without the fence, to show the stale-send check fails then.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.cluster.demo_node import prepare, stale_sends
from atlas.store.pg.server import apply_schema
from tests.postgres_cluster import database_for_script


class Nodes:
    """The demo node processes, by name."""

    def __init__(self, url: str, bots: list[str], args: argparse.Namespace, logs: Path):
        self.url, self.bots, self.args, self.logs = url, bots, args, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "atlas.cluster.demo_node",
            "--url",
            self.url,
            "--name",
            name,
            "--bots",
            ",".join(self.bots),
            "--lease",
            str(self.args.lease),
            "--heartbeat",
            str(self.args.heartbeat),
            "--send-every",
            str(self.args.send_every),
        ]
        if self.args.unfenced:
            argv.append("--unfenced")
        log = (self.logs / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log)

    def signal(self, name: str, signum: int) -> None:
        os.kill(self.procs[name].pid, signum)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def held_by(conn: asyncpg.Connection, node: str) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT substr(resource, 5) AS bot, epoch FROM leases WHERE holder = $1 "
        "AND expires_at > clock_timestamp() AND starts_with(resource, 'bot:')",
        node,
    )
    return {row["bot"]: int(row["epoch"]) for row in rows}


async def taken_over(conn: asyncpg.Connection, before: dict[str, int]) -> bool:
    rows = await conn.fetch(
        "SELECT substr(resource, 5) AS bot, epoch FROM leases WHERE holder IS NOT NULL "
        "AND expires_at > clock_timestamp() AND substr(resource, 5) = ANY($1::text[])",
        list(before),
    )
    now = {row["bot"]: int(row["epoch"]) for row in rows}
    return all(now.get(bot, 0) > epoch for bot, epoch in before.items())


async def wait_for(check: Callable[[], Awaitable[bool]], seconds: float, what: str) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > seconds:
            raise SystemExit(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def bench(url: str, args: argparse.Namespace, logs: Path) -> dict[str, object]:
    conn = await asyncpg.connect(url)
    sampler = await asyncpg.connect(url)
    await apply_schema(conn, url)
    await prepare(conn)
    bots = [f"bot{n}" for n in range(1, args.bots + 1)]
    names = [f"n{n}" for n in range(1, args.nodes + 1)]
    nodes = Nodes(url, bots, args, logs)
    rng = random.Random(args.seed)
    excluded: set[str] = set()  # killed or paused: their beliefs are not counted
    double_holders = 0
    samples = 0

    async def all_held() -> bool:
        count = await conn.fetchval(
            "SELECT count(*) FROM leases WHERE holder IS NOT NULL "
            "AND expires_at > clock_timestamp() AND starts_with(resource, 'bot:')"
        )
        return int(count) == len(bots)

    async def sample() -> None:
        nonlocal double_holders, samples
        while True:
            doubled = await sampler.fetchval(
                "SELECT count(*) FROM (SELECT bot FROM demo_holding "
                "WHERE NOT (node = ANY($1::text[])) GROUP BY bot HAVING count(*) > 1) d",
                sorted(excluded),
            )
            samples += 1
            double_holders += int(doubled)
            await asyncio.sleep(0.1)

    takeovers: list[float] = []
    try:
        for name in names:
            nodes.start(name)
        await wait_for(all_held, 30, "every bot held")
        sampling = asyncio.create_task(sample())
        await asyncio.sleep(args.heartbeat * 3)  # let the shares settle
        for kill in range(args.kills):
            victim = rng.choice(names)
            before = await held_by(conn, victim)
            excluded.add(victim)
            nodes.signal(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            nodes.procs[victim].wait()
            await conn.execute("DELETE FROM demo_holding WHERE node = $1", victim)
            await wait_for(lambda b=before: taken_over(conn, b), args.lease * 4, "a takeover")
            took = time.monotonic() - killed_at
            takeovers.append(took)
            print(f"kill {kill + 1}: {victim} held {sorted(before)}, taken over in {took:.2f} s")
            nodes.start(victim)
            excluded.discard(victim)
            await asyncio.sleep(args.interval)

        # A pause past the lease: the node must not send once it wakes up.
        victim = rng.choice(names)
        before = await held_by(conn, victim)
        stopped_at = await conn.fetchval("SELECT clock_timestamp()")
        excluded.add(victim)
        nodes.signal(victim, signal.SIGSTOP)
        await wait_for(lambda: taken_over(conn, before), args.lease * 4, "a paused node's bots")
        await asyncio.sleep(args.heartbeat)
        nodes.signal(victim, signal.SIGCONT)
        await asyncio.sleep(args.heartbeat * 2 + 1)
        excluded.discard(victim)
        late_sends = await conn.fetchval(
            "SELECT count(*) FROM demo_sends WHERE node = $1 AND sent_at > $2 "
            "AND (bot, epoch) IN (SELECT * FROM unnest($3::text[], $4::bigint[]))",
            victim,
            stopped_at,
            list(before),
            list(before.values()),
        )
        refused = await conn.fetchval(
            "SELECT count(*) FROM demo_events WHERE node = $1 AND kind = 'refused' AND at > $2",
            victim,
            stopped_at,
        )
        print(f"pause: {victim} held {sorted(before)}, sends after waking: {late_sends}")
        await asyncio.sleep(args.heartbeat * 2)
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
    finally:
        nodes.stop_all()
    stale = await stale_sends(conn)
    sends = await conn.fetchval("SELECT count(*) FROM demo_sends")
    await conn.close()
    await sampler.close()
    return {
        "kills": len(takeovers),
        "takeover_p50_s": round(statistics.median(takeovers), 2) if takeovers else None,
        "takeover_max_s": round(max(takeovers), 2) if takeovers else None,
        "takeovers_s": [round(took, 2) for took in takeovers],
        "double_holder_samples": double_holders,
        "samples": samples,
        "sends": int(sends),
        "stale_sends_landed": stale,
        "paused_node_sends_after_waking": int(late_sends),
        "paused_node_sends_refused": int(refused),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway one)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--bots", type=int, default=6)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--send-every", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--unfenced", action="store_true", help="show the checks failing")
    args = parser.parse_args()
    with database_for_script(args.url) as url, tempfile.TemporaryDirectory() as folder:
        results = asyncio.run(bench(url, args, Path(folder)))
    for key, value in results.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
