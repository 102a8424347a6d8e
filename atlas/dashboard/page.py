"""A dashboard page: its nav title, its path, and a `setup(router)` adding its routes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True)
class Page:
    title: str
    path: str
    setup: Callable[[web.UrlDispatcher], None]
