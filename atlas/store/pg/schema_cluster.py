"""PostgreSQL schema steps 30-39: nodes, leases and messages between nodes."""

from __future__ import annotations

from atlas.store.pg.schema_step import SchemaStep

STEPS: list[SchemaStep] = []
