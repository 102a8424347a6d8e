"""The dashboard's pages, in nav order. Each module has a `PAGE` (atlas/dashboard/page.py); a
new page (Waiting, Chat, Routines…) is a new module added to this list, and the base
template's nav is built from it.
"""

from __future__ import annotations

from atlas.dashboard.page import Page
from atlas.dashboard.pages import (
    chat,
    conversations,
    home,
    memory,
    routines,
    trust,
    usage,
    waiting,
    workbench,
)

PAGES: list[Page] = [
    home.PAGE,
    waiting.PAGE,
    chat.PAGE,
    conversations.PAGE,
    routines.PAGE,
    workbench.PAGE,
    trust.PAGE,
    memory.PAGE,
    usage.PAGE,
]
