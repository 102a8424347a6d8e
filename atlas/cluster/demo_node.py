"""A demo node for the failover benchmark and test: ClusterNode with fake bots that "send".

    python -m atlas.cluster.demo_node --url postgresql://... --name n1 --bots b1,b2,b3

Each bot this node holds writes a row to `demo_sends` every `--send-every` seconds, fenced by
its lease (atlas/cluster/leases.py), as a real bot's outbox sender would. `on_gained` and
`on_lost` are logged in `demo_events` and mirrored in `demo_holding` (which node believes it
holds which bot), for scripts/bench_failover.py and tests/integration/test_cluster_failover.py
to check: no stale send landed, no two nodes held a bot at once.

`--unfenced` sends without the fence and trusts the node's own view (`held`): only to show
that the checks catch stale sends (a paused node sends on waking up).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

import asyncpg

from atlas.cluster.leases import FenceError, fenced
from atlas.cluster.node import ClusterNode, ClusterTiming
from atlas.store.pg.server import PgServer

log = logging.getLogger("atlas.cluster.demo")

# One sequence orders sends and events alike: a send of epoch N numbered after the event
# "gained epoch N + 1" of the same bot landed after the takeover, which fencing forbids.
DEMO_TABLES = (
    "CREATE SEQUENCE IF NOT EXISTS demo_order",
    "CREATE TABLE IF NOT EXISTS demo_sends (id BIGINT PRIMARY KEY DEFAULT nextval('demo_order'), "
    "bot TEXT NOT NULL, node TEXT NOT NULL, epoch BIGINT NOT NULL, "
    "sent_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE IF NOT EXISTS demo_events (id BIGINT PRIMARY KEY DEFAULT nextval('demo_order'), "
    "bot TEXT NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL, epoch BIGINT, "
    "at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE IF NOT EXISTS demo_holding (bot TEXT NOT NULL, node TEXT NOT NULL, "
    "epoch BIGINT NOT NULL, PRIMARY KEY (bot, node))",
)

_DEMO_LOCK = 0x44454D4F  # "DEMO": processes starting at once create the tables once

STALE_SENDS = (
    # A send whose number comes after a newer tenure of its bot began (gained) or sent.
    "SELECT count(*) FROM demo_sends s WHERE EXISTS (SELECT 1 FROM demo_events g "
    "WHERE g.kind = 'gained' AND g.bot = s.bot AND g.epoch > s.epoch AND g.id < s.id) "
    "OR EXISTS (SELECT 1 FROM demo_sends t WHERE t.bot = s.bot AND t.epoch > s.epoch "
    "AND t.id < s.id)"
)


async def prepare(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _DEMO_LOCK)
        for statement in DEMO_TABLES:
            await conn.execute(statement)


async def stale_sends(conn: asyncpg.Connection) -> int:
    """How many sends landed with an epoch older than one already begun for their bot."""
    return int(await conn.fetchval(STALE_SENDS))


class DemoBots:
    """The fake bots of one node: a sending task per bot held."""

    def __init__(self, server: PgServer, send_every: float, *, unfenced: bool = False):
        self.server = server
        self.send_every = send_every
        self.unfenced = unfenced
        self.node: ClusterNode | None = None
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def gained(self, bot: str, epoch: int) -> None:
        assert self.node is not None
        name = self.node.name
        async with self.server.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO demo_events (bot, node, kind, epoch) VALUES ($1, $2, 'gained', $3)",
                bot,
                name,
                epoch,
            )
            await conn.execute(
                "INSERT INTO demo_holding (bot, node, epoch) VALUES ($1, $2, $3) "
                "ON CONFLICT (bot, node) DO UPDATE SET epoch = EXCLUDED.epoch",
                bot,
                name,
                epoch,
            )
        self.tasks[bot] = asyncio.create_task(self._send_loop(bot, epoch))

    async def lost(self, bot: str) -> None:
        assert self.node is not None
        task = self.tasks.pop(bot, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        async with self.server.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM demo_holding WHERE bot = $1 AND node = $2", bot, self.node.name
            )
            await conn.execute(
                "INSERT INTO demo_events (bot, node, kind) VALUES ($1, $2, 'lost')",
                bot,
                self.node.name,
            )

    async def _send_loop(self, bot: str, epoch: int) -> None:
        assert self.node is not None
        name = self.node.name
        while True:
            await asyncio.sleep(self.send_every)
            insert = "INSERT INTO demo_sends (bot, node, epoch) VALUES ($1, $2, $3)"
            if self.unfenced:
                if bot not in self.node.held:
                    return
                await self.server.pool.execute(insert, bot, name, epoch)
                continue
            fence = self.node.fence(bot)
            if fence is None or fence.epoch != epoch:
                return  # lost: on_lost follows
            try:
                async with fenced(self.server, fence) as conn:
                    await conn.execute(insert, bot, name, epoch)
            except FenceError as exc:
                log.warning("%s", exc)
                await self.server.pool.execute(
                    "INSERT INTO demo_events (bot, node, kind, epoch) "
                    "VALUES ($1, $2, 'refused', $3)",
                    bot,
                    name,
                    epoch,
                )
                return


async def run(args: argparse.Namespace) -> None:
    server = PgServer(args.url, max_connections=4 + len(args.bots))
    await server.open()
    async with server.pool.acquire() as conn:
        await prepare(conn)
        # A restarted node's old beliefs died with its process.
        await conn.execute("DELETE FROM demo_holding WHERE node = $1", args.name)
    bots = DemoBots(server, args.send_every, unfenced=args.unfenced)
    node = ClusterNode(
        server,
        args.name,
        args.bots,
        ClusterTiming(lease=args.lease, heartbeat=args.heartbeat),
        on_gained=bots.gained,
        on_lost=bots.lost,
    )
    bots.node = node
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await node.start()
    print(f"node {args.name} started", flush=True)
    await stopping.wait()
    await node.stop()
    await server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A demo cluster node with fake bots.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--bots", required=True, type=lambda text: text.split(","))
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--send-every", type=float, default=0.1)
    parser.add_argument("--unfenced", action="store_true", help="only to show the checks fail")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"{args.name} %(levelname)s %(message)s")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
