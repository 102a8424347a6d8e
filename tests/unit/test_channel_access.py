"""Who may talk to a bot: allowed users, pairing codes, the `atlas pairing` command."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.channels.access import (
    CODE_ALPHABET,
    Access,
    approve_pairing,
    deny_pairing,
    list_pairings,
    request_pairing,
)
from atlas.channels.pairing_cli import add_parser, pairing_main
from atlas.errors import AtlasError
from atlas.store.home_db import HomeStore


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    home_store = HomeStore(tmp_path / "atlas.db")
    yield home_store
    await home_store.close()


async def test_allowed_users_pass_and_strangers_get_one_code(store: HomeStore) -> None:
    access = Access(store, "atlas", "telegram", ["1"])
    assert await access.is_allowed("1")
    assert not await access.is_allowed("2")
    reply = await access.stranger("2", user_name="Bob", chat="2")
    assert reply is not None
    [pairing] = await list_pairings(store)
    assert pairing.code in reply
    assert len(pairing.code) == 8 and set(pairing.code) <= set(CODE_ALPHABET)
    assert await access.stranger("2") is None  # pending: no second reply


async def test_approval_lets_the_person_in_on_that_bot_and_platform_only(store: HomeStore) -> None:
    pairing = await request_pairing(store, "atlas", "telegram", "2")
    assert pairing is not None
    approved = await approve_pairing(store, f" {pairing.code.lower()} ")
    assert approved.status == "approved"
    assert await Access(store, "atlas", "telegram", []).is_allowed("2")
    assert not await Access(store, "atlas", "slack", []).is_allowed("2")
    assert not await Access(store, "other", "telegram", []).is_allowed("2")
    with pytest.raises(AtlasError, match="approved, not pending"):
        await approve_pairing(store, pairing.code)


async def test_codes_expire_after_an_hour_and_a_new_one_is_given(store: HomeStore) -> None:
    then = datetime.now(UTC) - timedelta(hours=1, minutes=1)
    old = await request_pairing(store, "atlas", "telegram", "3", now=then)
    assert old is not None
    with pytest.raises(AtlasError, match="expired"):
        await approve_pairing(store, old.code)
    fresh = await request_pairing(store, "atlas", "telegram", "3")
    assert fresh is not None and fresh.code != old.code


async def test_denied_people_get_nothing_more(store: HomeStore) -> None:
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


async def test_in_a_group_the_code_goes_privately_and_never_to_the_group(store: HomeStore) -> None:
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
    store: HomeStore,
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
    store: HomeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code's status and the paired user are one transaction: the store's connection
    commits each lone statement itself, so the status must not stay "approved" alone."""
    import sqlite_utils.db

    pairing = await request_pairing(store, "atlas", "telegram", "4")
    assert pairing is not None

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sqlite_utils.db.Table, "upsert", refused)
    with pytest.raises(OSError, match="disk full"):
        await approve_pairing(store, pairing.code)
    monkeypatch.undo()
    [still] = await list_pairings(store)
    assert still.code == pairing.code and still.status == "pending"
    assert not await Access(store, "atlas", "telegram", []).is_allowed("4")
    assert (await approve_pairing(store, pairing.code)).status == "approved"
