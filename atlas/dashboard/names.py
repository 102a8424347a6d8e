"""What to call a conversation on the dashboard: the person or group, not a chat id.

A conversation row has its channel and chat id, and a title when one was given. The home's
store knows more of the people: those paired through a code (`paired_users`) and those who
asked for one (`pairing_codes`), each with the name their platform gave. A private chat's id
is the person's id on Telegram and Slack, so it names the chat; a group's title is stored
nowhere yet, so a group is called a group, with its id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlite_utils

# (platform, user id) -> the name the platform gave that person
Names = Mapping[tuple[str, str], str]

PLACES = {"dashboard": "Chat on the dashboard", "console": "The terminal"}


def people(db: sqlite_utils.Database, bot: str) -> dict[tuple[str, str], str]:
    """The names the home's store (atlas.db) knows for `bot`'s people; a paired name wins
    over the one of an older request."""
    names: dict[tuple[str, str], str] = {}
    queries = (
        "SELECT platform, user_id, user_name FROM pairing_codes WHERE bot = ? "
        "AND user_name != '' ORDER BY created_at",
        "SELECT platform, user_id, user_name FROM paired_users WHERE bot = ? AND user_name != ''",
    )
    for query in queries:
        for platform, user_id, user_name in db.execute(query, [bot]).fetchall():
            names[(str(platform), str(user_id))] = str(user_name)
    return names


def conversation_name(row: Mapping[str, Any], names: Names) -> str:
    """The title, else the person (by the chat's or the conversation's user id), else where
    it is: a group on a platform, or a routine's or a place's name."""
    if row.get("title"):
        return str(row["title"])
    channel, chat, user = str(row["channel"]), str(row["chat"]), str(row.get("user") or "")
    platform = channel.split(":", 1)[0]
    if platform in PLACES:
        return PLACES[platform]
    for who in (chat, user):
        if who and (platform, who) in names:
            return names[(platform, who)]
    if chat.startswith("-") or (platform == "slack" and chat[:1] in ("C", "G")):
        return f"{platform.capitalize()} group {chat}"
    return f"{platform.capitalize()} {chat}"
