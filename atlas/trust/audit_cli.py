"""`atlas trust log`: the latest gate decisions from the home's atlas.db."""

from __future__ import annotations

import json

from atlas.home import Home
from atlas.store.home_engines import HomeEngines


async def print_log(home: Home, *, limit: int, as_json: bool) -> int:
    engines = await HomeEngines.open(home)  # atlas.db, or the home's PostgreSQL database
    try:
        rows = await engines.audit.recent_decisions(limit)
    finally:
        await engines.close()
    if not rows:
        print("no gate decisions recorded yet")
    for row in reversed(rows):  # oldest first, like a log
        if as_json:
            print(json.dumps(row))
        else:
            print(
                f"{row['at'][:19]} {row['bot']}#{row['conversation_id']} {row['tool']} "
                f"{row['verdict'].upper()} [{row['rule']}] by {row['answered_by']}: {row['reason']}"
            )
    return 0
