"""atlas.db from a worker process: every read and write runs in the home's process.

One process writes atlas.db (the gate's decisions, delegations, pairings, routines): a worker's
`HomeStore` sends each function it is given (`call`, `quick`, and so every method built on them)
over the link, pickled with cloudpickle (closures included), and the home's process runs it on its
own writer thread. Nothing in a worker opens the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import cloudpickle
import sqlite_utils

from atlas.store.home_db import HomeStore
from atlas.workers.link import Link

T = TypeVar("T")

OP = "home_db"


class RemoteHomeStore(HomeStore):
    def __init__(self, path: Path, link: Link) -> None:
        super().__init__(path)
        self._link = link

    async def call(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        result: T = await self._link.ask(OP, cloudpickle.dumps(fn), False)
        return result

    async def quick(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        result: T = await self._link.ask(OP, cloudpickle.dumps(fn), True)
        return result

    async def close(self) -> None:
        return None  # the home's process owns the file


def serve_home_db(link: Link, store: HomeStore) -> None:
    """In the home's process: run a worker's atlas.db work on `store`."""

    async def run(pickled: bytes, quick: bool) -> Any:
        fn = cloudpickle.loads(pickled)
        result = await (store.quick(fn) if quick else store.call(fn))
        # `lambda db: db[t].insert(row)` gives back the table: nobody reads it, and it holds
        # the connection, which cannot cross.
        return None if isinstance(result, sqlite_utils.db.Queryable) else result

    link.on(OP, run)
