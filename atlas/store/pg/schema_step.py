"""One numbered change to the PostgreSQL schema: its number, its name and its statements."""

from __future__ import annotations

SchemaStep = tuple[int, str, tuple[str, ...]]
