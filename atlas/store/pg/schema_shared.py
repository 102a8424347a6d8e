"""PostgreSQL schema steps 20-29: pairing, executors' records and the dashboard's reads."""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = []
