"""The fair share of bots per node, as a pure function."""

from __future__ import annotations

from atlas.cluster.balance import Plan, plan, targets

BOTS = ["a", "b", "c", "d"]


def test_targets_add_up_to_the_bots_and_differ_by_at_most_one() -> None:
    assert targets(["n2", "n1"], 4) == {"n1": 2, "n2": 2}
    assert targets(["n3", "n1", "n2"], 4) == {"n1": 2, "n2": 1, "n3": 1}
    assert targets(["n1", "n2", "n3"], 2) == {"n1": 1, "n2": 1, "n3": 0}
    assert targets([], 4) == {}
    for nodes in range(1, 8):
        for bots in range(0, 20):
            shares = targets([f"n{i}" for i in range(nodes)], bots).values()
            assert sum(shares) == bots and max(shares) - min(shares) <= 1


def test_a_lone_node_takes_every_free_bot() -> None:
    assert plan("n1", ["n1"], {}, BOTS) == Plan(("a", "b", "c", "d"), (), 4)


def test_a_node_over_its_share_releases_the_last_ones_when_another_joins() -> None:
    holders = dict.fromkeys(BOTS, "n1")
    assert plan("n1", ["n1", "n2"], holders, BOTS) == Plan((), ("c", "d"), 2)
    # The joining node waits for the released ones: nothing is free yet.
    assert plan("n2", ["n1", "n2"], holders, BOTS) == Plan((), (), 2)
    released = {"a": "n1", "b": "n1"}
    assert plan("n2", ["n1", "n2"], released, BOTS) == Plan(("c", "d"), (), 2)


def test_a_third_node_joining_two_moves_one_bot() -> None:
    holders = {"a": "n1", "b": "n1", "c": "n2", "d": "n2"}
    live = ["n1", "n2", "n3"]
    assert plan("n1", live, holders, BOTS) == Plan((), (), 2)
    assert plan("n2", live, holders, BOTS) == Plan((), ("d",), 1)
    assert plan("n3", live, {**holders, "d": None}, BOTS) == Plan(("d",), (), 1)


def test_bots_of_a_dead_node_count_as_free() -> None:
    holders = {"a": "n1", "b": "n1", "c": "dead", "d": "dead"}
    assert plan("n2", ["n1", "n2"], holders, BOTS) == Plan(("c", "d"), (), 2)


def test_a_node_at_its_share_takes_nothing_more() -> None:
    holders = {"a": "n1", "b": "n1"}
    assert plan("n1", ["n1", "n2"], holders, BOTS) == Plan((), (), 2)


def test_the_same_inputs_give_the_same_plan_in_any_order() -> None:
    holders = {"d": "n1", "c": "n1", "b": "n1"}
    first = plan("n1", ["n2", "n1", "n3"], holders, ["d", "c", "b", "a"])
    second = plan("n1", ["n3", "n1", "n2"], dict(sorted(holders.items())), BOTS)
    assert first == second == Plan((), ("d",), 2)


def test_a_node_not_yet_seen_alive_still_counts_itself() -> None:
    assert plan("new", ["n1"], dict.fromkeys(BOTS, "n1"), BOTS).target == 2
