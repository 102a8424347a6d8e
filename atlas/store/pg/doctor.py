"""`atlas doctor`'s lines for `[store] url`: the server reached, the schema's version, the
database's text handling, latency."""

from __future__ import annotations

from typing import Any

from atlas.errors import AtlasError
from atlas.store.pg.schema import SCHEMA_VERSION
from atlas.store.pg.server import PgServer, redact_url

CheckLine = tuple[str, bool, str, str]
# A round trip slower than this makes every turn (a dozen statements) visibly slower.
SLOW_MS = 20.0


async def store_checks(settings: Any) -> list[CheckLine]:
    """Nothing for the embedded default; for a PostgreSQL url, one line each for the server,
    the schema version and the latency (doctor never changes the database: no migration)."""
    url = settings.store.url
    if url is None:
        return []
    where = redact_url(url)
    server = PgServer(url, settings.store.password(), max_connections=1)
    try:
        await server.open(migrate=False)
    except AtlasError as exc:
        fix = (
            f"start the server, check the address, and put the password in "
            f"${settings.store.password_env}"
        )
        return [("store server", False, str(exc), fix)]
    try:
        check = await server.check()
    finally:
        await server.close()
    lines: list[CheckLine] = [
        ("store server", True, f"PostgreSQL {check.server_version} at {where}", "")
    ]
    if check.schema_version == SCHEMA_VERSION:
        lines.append(("store schema", True, f"version {check.schema_version}", ""))
    elif check.schema_version < SCHEMA_VERSION:
        lines.append(
            (
                "store schema",
                False,
                f"version {check.schema_version}, this Atlas needs {SCHEMA_VERSION}",
                f"run `atlas store migrate --to {where}` (it brings the schema up to date)",
            )
        )
    else:
        lines.append(
            (
                "store schema",
                False,
                f"version {check.schema_version}, newer than this Atlas ({SCHEMA_VERSION})",
                "upgrade Atlas",
            )
        )
    if check.unicode_case:
        lines.append(("store text", True, f"{check.encoding}, letters of every script", ""))
    else:
        lines.append(
            (
                "store text",
                False,
                f"encoding {check.encoding} without Unicode case folding: searches would "
                "miss upper- and lower-case forms of letters outside ASCII",
                "make the database with ENCODING 'UTF8' and a UTF-8 LC_CTYPE (e.g. "
                "'C.UTF-8'), then `atlas store migrate` into it",
            )
        )
    slow = check.latency_ms > SLOW_MS
    lines.append(
        (
            "store latency",
            not slow,
            f"{check.latency_ms:.2f} ms per round trip (median of 5)",
            f"over {SLOW_MS:.0f} ms: put the server nearer (same network or machine)"
            if slow
            else "",
        )
    )
    return lines
