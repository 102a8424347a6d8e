"""Who may talk to a bot: allowed users, pairing codes, the `atlas pairing` command.

The pairing tests run on both engines (atlas/channels/pairing_store.py): atlas.db, and the
home's PostgreSQL database (the `postgres` marker), where races between processes are tried
too: two approvals of one code at once, two requests of one stranger at once."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.channels.access import (
    CODE_ALPHABET,
    Access,
    approve_pairing,
    deny_pairing,
    list_pairings,
    paired_users,
    request_pairing,
    withdraw_pairing,
)
from atlas.channels.pairing_cli import add_parser, pairing_main
from atlas.channels.pairing_store import PairingEngine, SqlitePairing, pairing_engine
from atlas.errors import AtlasError
from atlas.store.home_db import HomeStore
from atlas.store.pg.pairing import PgPairing
from atlas.store.pg.server import PgServer

Store = HomeStore | PairingEngine


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """atlas.db's HomeStore as every caller hands it in today, or PostgreSQL's engine."""
    if request.param == "sqlite":
        home_store = HomeStore(tmp_path / "atlas.db")
        yield home_store
        await home_store.close()
        return
    async with PgServer(request.getfixturevalue("postgres_url")) as server:
        yield PgPairing(server)


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[HomeStore]:
    home_store = HomeStore(tmp_path / "atlas.db")
    yield home_store
    await home_store.close()


@pytest.fixture
async def pg_server(postgres_url: str) -> AsyncIterator[PgServer]:
    async with PgServer(postgres_url) as server:
        yield server


def test_both_are_pairing_engines(tmp_path: Path) -> None:
    home_store = HomeStore(tmp_path / "atlas.db")
    assert isinstance(pairing_engine(home_store), SqlitePairing)
    pg = PgPairing(PgServer("postgresql://x@127.0.0.1/x"))
    assert isinstance(pg, PairingEngine) and pairing_engine(pg) is pg


async def test_allowed_users_pass_and_strangers_get_one_code(store: Store) -> None:
    access = Access(store, "atlas", "telegram", ["1"])
    assert await access.is_allowed("1")
    assert not await access.is_allowed("2")
    reply = await access.stranger("2", user_name="Bob", chat="2")
    assert reply is not None
    [pairing] = await list_pairings(store)
    assert pairing.code in reply
    assert len(pairing.code) == 8 and set(pairing.code) <= set(CODE_ALPHABET)
    assert await access.stranger("2") is None  # pending: no second reply


async def test_approval_lets_the_person_in_on_that_bot_and_platform_only(store: Store) -> None:
    pairing = await request_pairing(store, "atlas", "telegram", "2")
    assert pairing is not None
    approved = await approve_pairing(store, f" {pairing.code.lower()} ")
    assert approved.status == "approved"
    assert await Access(store, "atlas", "telegram", []).is_allowed("2")
    assert not await Access(store, "atlas", "slack", []).is_allowed("2")
    assert not await Access(store, "other", "telegram", []).is_allowed("2")
    with pytest.raises(AtlasError, match="approved, not pending"):
        await approve_pairing(store, pairing.code)


async def test_codes_expire_after_an_hour_and_a_new_one_is_given(store: Store) -> None:
    then = datetime.now(UTC) - timedelta(hours=1, minutes=1)
    old = await request_pairing(store, "atlas", "telegram", "3", now=then)
    assert old is not None
    with pytest.raises(AtlasError, match="expired"):
        await approve_pairing(store, old.code)
    fresh = await request_pairing(store, "atlas", "telegram", "3")
    assert fresh is not None and fresh.code != old.code


async def test_denied_people_get_nothing_more(store: Store) -> None:
    pairing = await request_pairing(store, "atlas", "telegram", "4")
    assert pairing is not None
    await deny_pairing(store, pairing.code)
    assert await request_pairing(store, "atlas", "telegram", "4") is None
    assert not await Access(store, "atlas", "telegram", []).is_allowed("4")
    with pytest.raises(AtlasError, match="no pairing code"):
        await deny_pairing(store, "ZZZZZZZZ")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


async def test_pairing_command_lists_and_approves(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "atlas.db"
    setup = HomeStore(path)
    pairing = await request_pairing(setup, "atlas", "telegram", "5", user_name="Eve")
    await setup.close()
    assert pairing is not None
    assert await pairing_main(HomeStore(path), parse(["pairing", "list"])) == 0
    assert pairing.code in capsys.readouterr().out
    assert await pairing_main(HomeStore(path), parse(["pairing", "approve", pairing.code])) == 0
    assert "approved" in capsys.readouterr().out
    assert await pairing_main(HomeStore(path), parse(["pairing", "list"])) == 0
    assert "no pending pairing codes" in capsys.readouterr().out


# ---- a stranger in a group gets the code privately (issue 18, item 10) ---------------------------


async def test_in_a_group_the_code_goes_privately_and_never_to_the_group(store: Store) -> None:
    from atlas.channels.access import SENT_PRIVATELY

    access = Access(store, "atlas", "telegram", ["1"])
    private: list[str] = []

    async def deliver(text: str) -> bool:
        private.append(text)
        return True

    group_text = await access.group_stranger("2", deliver, user_name="Bob", chat="-100")
    [pairing] = await list_pairings(store)
    assert group_text == SENT_PRIVATELY and pairing.code not in group_text
    assert len(private) == 1 and pairing.code in private[0]
    assert await access.group_stranger("2", deliver) is None  # pending: silent, as in private


async def test_when_the_private_message_fails_the_group_is_told_without_the_code(
    store: Store,
) -> None:
    from atlas.channels.access import WRITE_DIRECTLY

    access = Access(store, "atlas", "telegram", ["1"])
    attempts: list[str] = []

    async def unreachable(text: str) -> bool:
        attempts.append(text)
        return False

    start = datetime(2026, 1, 1, tzinfo=UTC)
    told = await access.group_stranger("2", unreachable, chat="-100", now=start)
    assert told == WRITE_DIRECTLY
    code = attempts[0].split("\n\n")[1]
    assert len(code) == 8 and code not in told
    assert await list_pairings(store) == []  # withdrawn: a private message gets a fresh code
    # Told once an hour at most, however often they speak in the group.
    later = start + timedelta(minutes=10)
    assert await access.group_stranger("2", unreachable, now=later) is None
    assert await access.group_stranger("2", unreachable, now=start + timedelta(hours=2)) == told
    # Writing privately now works as for anyone else.
    reply = await access.stranger("2", chat="2")
    assert reply is not None and len(attempts) == 3


async def test_an_approval_that_fails_half_way_leaves_the_code_pending(
    sqlite_store: HomeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code's status and the paired user are one transaction: the store's connection
    commits each lone statement itself, so the status must not stay "approved" alone."""
    import sqlite_utils.db

    pairing = await request_pairing(sqlite_store, "atlas", "telegram", "4")
    assert pairing is not None

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sqlite_utils.db.Table, "upsert", refused)
    with pytest.raises(OSError, match="disk full"):
        await approve_pairing(sqlite_store, pairing.code)
    monkeypatch.undo()
    [still] = await list_pairings(sqlite_store)
    assert still.code == pairing.code and still.status == "pending"
    assert not await Access(sqlite_store, "atlas", "telegram", []).is_allowed("4")
    assert (await approve_pairing(sqlite_store, pairing.code)).status == "approved"


async def test_expired_codes_are_not_counted_pending_and_paired_users_listed(store: Store) -> None:
    then = datetime.now(UTC) - timedelta(hours=2)
    old = await request_pairing(store, "atlas", "telegram", "6", now=then)
    fresh = await request_pairing(store, "atlas", "slack", "6", user_name="Ann")
    assert old is not None and fresh is not None
    assert [p.code for p in await list_pairings(store)] == [fresh.code]
    everything = await list_pairings(store, everything=True)
    assert [(p.code, p.status) for p in everything] == [
        (fresh.code, "pending"),
        (old.code, "expired"),
    ]
    assert await pairing_engine(store).pending_count(datetime.now(UTC).isoformat()) == 1
    await approve_pairing(store, fresh.code)
    [user] = await paired_users(store)
    assert (user["bot"], user["platform"], user["user_id"], user["user_name"], user["code"]) == (
        "atlas",
        "slack",
        "6",
        "Ann",
        fresh.code,
    )
    await withdraw_pairing(store, fresh.code)  # decided: a withdrawal leaves it alone
    assert [p.status for p in await list_pairings(store, everything=True)][0] == "approved"


# ---- races between processes, on PostgreSQL ----------------------------------------------------


async def test_two_approvals_of_one_code_at_once_one_wins(pg_server: PgServer) -> None:
    """Two dashboards or CLIs (two pools: two processes) approve one code at the same moment:
    one approves it, the other is told it is no longer pending."""
    other = PgServer(pg_server.url)
    await other.open()
    try:
        for attempt in range(5):
            pairing = await request_pairing(
                PgPairing(pg_server), "atlas", "telegram", f"r{attempt}"
            )
            assert pairing is not None
            results = await asyncio.gather(
                approve_pairing(PgPairing(pg_server), pairing.code),
                approve_pairing(PgPairing(other), pairing.code),
                return_exceptions=True,
            )
            won = [r for r in results if not isinstance(r, BaseException)]
            lost = [r for r in results if isinstance(r, BaseException)]
            assert len(won) == 1 and won[0].status == "approved"
            assert len(lost) == 1 and isinstance(lost[0], AtlasError)
            assert "approved, not pending" in str(lost[0])
        assert len(await paired_users(PgPairing(pg_server))) == 5
    finally:
        await other.close()


async def test_two_requests_of_one_stranger_at_once_give_one_code(pg_server: PgServer) -> None:
    """One stranger's messages reach two nodes at once: one reply with a code, one silence."""
    engines = [PgPairing(pg_server), PgPairing(pg_server), PgPairing(pg_server)]
    for attempt in range(5):
        results = await asyncio.gather(
            *(request_pairing(engine, "atlas", "slack", f"s{attempt}") for engine in engines)
        )
        assert sum(result is not None for result in results) == 1
    pending = await list_pairings(PgPairing(pg_server))
    assert sorted(p.user_id for p in pending) == [f"s{n}" for n in range(5)]
