"""Each node's fair share of the bots: a pure function of who is alive and who holds what.

With B bots and N live nodes every node aims at ceil(B / N) or floor(B / N): the first B mod N
nodes in name order aim at the ceiling, the others at the floor, so the targets add up to B.
A flat ceil(B / N) for everyone would leave a joining node idle: with 4 bots on two nodes
holding 2 each, a third node's ceiling is still 2 and nobody would be over it.

A node takes free bots (no live holder) only up to its target and releases the bots it holds
beyond it, so leases move when a node joins or leaves and settle once every node has run.
Every node computes the same targets from the same inputs: the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    take: tuple[str, ...]  # free bots to try, in order (another node may win some)
    release: tuple[str, ...]  # bots this node holds beyond its target
    target: int


def targets(live_nodes: Iterable[str], bot_count: int) -> dict[str, int]:
    """How many bots each live node aims at."""
    names = sorted(set(live_nodes))
    if not names:
        return {}
    base, extra = divmod(bot_count, len(names))
    return {name: base + (1 if index < extra else 0) for index, name in enumerate(names)}


def plan(
    me: str,
    live_nodes: Iterable[str],
    holders: Mapping[str, str | None],
    bots: Sequence[str],
) -> Plan:
    """What `me` should take and release.

    `holders`: bot -> the node holding its lease now (None or absent when free or expired).
    A bot held by a node not among `live_nodes` counts as free (its lease will expire; taking
    it is tried and fails until then). `me` counts as live even if its own heartbeat is not
    seen yet.
    """
    live = set(live_nodes) | {me}
    wanted = sorted(set(bots))
    target = targets(live, len(wanted))[me]
    mine = [bot for bot in wanted if holders.get(bot) == me]
    if len(mine) > target:
        # The last ones in name order: every node agrees which ones move.
        return Plan((), tuple(mine[target:]), target)
    free = [bot for bot in wanted if holders.get(bot) not in live]
    # Try every free bot, in order: a race lost to another node moves on to the next one;
    # the caller stops once it holds its target.
    return Plan(tuple(free) if len(mine) < target else (), (), target)
