"""The PostgreSQL schema's steps are applied by number, not by the highest one applied: the
parts of the home number their steps in ranges of their own (atlas/store/pg/schema.py)."""

from __future__ import annotations

import asyncpg
import pytest

from atlas.errors import AtlasError
from atlas.store.pg import schema, server
from atlas.store.pg.server import applied_steps, apply_schema, current_version


async def test_a_step_below_the_highest_applied_is_still_applied(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        # An older Atlas knew a step above every range but not step 12 (added later, in a
        # lower range).
        top = schema.SCHEMA_VERSION + 1
        later = (top, "a_later_range", ("CREATE TABLE later_range (id INTEGER)",))
        monkeypatch.setattr(server, "STEPS", [*schema.STEPS, later])
        monkeypatch.setattr(server, "SCHEMA_VERSION", top)
        first = await apply_schema(conn, "the test database")
        assert first[-1] == top and 12 not in first

        missed = (12, "a_missed_step", ("CREATE TABLE missed_step (id INTEGER)",))
        monkeypatch.setattr(server, "STEPS", sorted([*schema.STEPS, missed, later]))
        assert await apply_schema(conn, "the test database") == [12]
        assert await conn.fetchval("SELECT to_regclass('missed_step') IS NOT NULL")
        assert {12, top} <= await applied_steps(conn)
        assert await current_version(conn) == top
        # Applied once: a third opening has nothing to do.
        assert await apply_schema(conn, "the test database") == []
    finally:
        await conn.close()


async def test_a_database_from_a_newer_atlas_is_refused(postgres_url: str) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        await apply_schema(conn, "the test database")
        await conn.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES ($1, 'future', 'now')",
            schema.SCHEMA_VERSION + 1,
        )
        with pytest.raises(AtlasError, match="newer than this Atlas knows"):
            await apply_schema(conn, "the test database")
    finally:
        await conn.close()


def test_step_numbers_are_sorted_and_unique() -> None:
    numbers = [number for number, _, _ in schema.STEPS]
    assert numbers == sorted(set(numbers))
    assert numbers[-1] == schema.SCHEMA_VERSION
