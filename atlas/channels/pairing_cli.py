"""`atlas pairing approve CODE | deny CODE | list`: kept apart from access.py so that building
the CLI's parser imports nothing heavy (the store pulls in sqlite-utils)."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas.channels.pairing_store import PairingEngine
    from atlas.home import Home
    from atlas.store.home_db import HomeStore


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add `atlas pairing approve CODE | deny CODE | list [--all]` to the CLI's subcommands."""
    pairing = sub.add_parser("pairing", help="approve or deny people who asked to talk to a bot")
    actions = pairing.add_subparsers(dest="pairing_command", required=True, metavar="ACTION")
    approve = actions.add_parser("approve", help="let the person with this code talk to the bot")
    approve.add_argument("code")
    deny = actions.add_parser("deny", help="refuse the person with this code")
    deny.add_argument("code")
    listing = actions.add_parser("list", help="pending codes (and with --all, every one)")
    listing.add_argument("--all", action="store_true", help="decided and expired codes too")
    return pairing


async def pairing_main(store: HomeStore | PairingEngine, args: argparse.Namespace) -> int:
    """Run one `atlas pairing` action against the home's atlas.db (closed after) or another
    engine's pairing (the home's PostgreSQL database); print what happened."""
    from atlas.channels.access import approve_pairing, deny_pairing, list_pairings
    from atlas.channels.pairing_store import PairingEngine

    try:
        if args.pairing_command == "approve":
            pairing = await approve_pairing(store, args.code)
            print(f"approved: {pairing.describe()}")
        elif args.pairing_command == "deny":
            pairing = await deny_pairing(store, args.code)
            print(f"denied: {pairing.describe()}")
        else:
            pairings = await list_pairings(store, everything=args.all)
            if not pairings:
                print("no pending pairing codes" if not args.all else "no pairing codes")
            for pairing in pairings:
                print(pairing.describe())
        return 0
    finally:
        if not isinstance(store, PairingEngine):  # atlas.db's HomeStore, opened for this call
            await store.close()


async def _pairing_of(home: Home, args: argparse.Namespace) -> int:
    from atlas.store.home_engines import HomeEngines

    engines = await HomeEngines.open(home)  # atlas.db, or the home's PostgreSQL database
    try:
        return await pairing_main(engines.pairing, args)
    finally:
        await engines.close()


def run_pairing(home: Home, args: argparse.Namespace) -> int:
    """Synchronous entry for atlas/cli.py: the home's pairing, where `[store] url` keeps it."""
    return asyncio.run(_pairing_of(home, args))


__all__ = ["add_parser", "pairing_main", "run_pairing"]
