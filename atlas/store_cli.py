"""`atlas store migrate --to URL`: the command line of the PostgreSQL store (docs/scaling.md).
Kept apart from the store so that building the CLI's parser imports nothing heavy."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def add_store_parser(sub: Any, home_loader: Any) -> None:
    """Add `store migrate --to URL` to the `atlas` subparsers."""
    store = sub.add_parser("store", help="where the home keeps its state (docs/scaling.md)")
    actions = store.add_subparsers(dest="store_action", required=True, metavar="ACTION")
    migrate = actions.add_parser(
        "migrate", help="copy every bot's conversations into a PostgreSQL database"
    )
    migrate.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="postgresql://user@host:port/database (password: [store] password_env)",
    )

    def run(args: argparse.Namespace) -> int:
        return store_main(home_loader(args), args)

    migrate.set_defaults(func=run)


def store_main(home: Any, args: argparse.Namespace) -> int:
    from atlas.config import StoreSettings
    from atlas.errors import AtlasError
    from atlas.store.pg.migrate import migrate_home
    from atlas.store.pg.server import redact_url

    try:
        StoreSettings(url=args.to)  # the same checks as config.toml's [store] url
    except ValueError as exc:
        raise AtlasError(f"--to: {_first_error(exc)}") from None
    password = home.settings.store.password()
    report = asyncio.run(migrate_home(home, args.to, password))
    copies, shared = report.bots, report.shared
    for copy in copies:
        print(
            f"{copy.bot}: {copy.conversations} conversations, {copy.messages} messages, "
            f"{copy.compactions} compactions copied and counted"
        )
    if shared is not None:
        print(
            f"atlas.db: {shared.gate_decisions} gate decisions, {shared.delegations} "
            "delegations copied and counted"
        )
        if shared.records is not None:
            print(f"atlas.db: {shared.records.describe()} copied and counted")
    for outbox in report.outboxes:
        print(f"{outbox.bot}: {outbox.rows} outbox rows copied and counted")
    if report.routines is not None:
        routines = report.routines
        left = (
            f" ({routines.duplicate_fires} second fire(s) of a slot left out)"
            if routines.duplicate_fires
            else ""
        )
        print(
            f"atlas.db: {routines.routines} routines, {routines.runs} routine runs copied "
            f"and counted{left}"
        )
    print(f"copied {len(copies)} bot(s) to {redact_url(args.to)}")
    print(
        f'to serve the home from it: [store] url = "{redact_url(args.to)}" in config.toml, '
        "the password in the variable [store] password_env names, then `atlas run` "
        "(docs/scaling.md)"
    )
    return 0


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return str(errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)
