"""PostgreSQL schema steps 10-19: the outbox and routine fires."""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = []
