"""Writing a new bot's folder: bot.toml, MISSION.md, memory/, skills/, workspace/."""

from __future__ import annotations

import json
import re
import shutil

from atlas.config import NAME_PATTERN
from atlas.errors import AtlasError
from atlas.home import Bot, Home

NAME_RULES = "lowercase letters, digits, '-' and '_', starting with a letter or digit"


def _toml_string(text: str) -> str:
    # A JSON string with ASCII escapes is a valid TOML basic string.
    return json.dumps(text, ensure_ascii=True)


def compose_mission(title: str, description: str) -> str:
    return (
        f"You are {title}, a bot of an Atlas home. {description.strip()}\n\n"
        "Work carefully, say plainly what you did and what you could not do, and ask when a "
        "request is unclear."
    )


def check_new_bot(home: Home, name: str, title: str, description: str) -> None:
    """Refuse what would make a broken or clashing bot, saying what to change."""
    if not re.fullmatch(NAME_PATTERN, name) or len(name) > 40:
        raise AtlasError(f"bot name {name!r} is not allowed: use {NAME_RULES}, at most 40")
    if name in home.bots or (home.bots_dir / name).exists():
        raise AtlasError(f"a bot named {name!r} already exists ({home.bots_dir / name})")
    if not title.strip():
        raise AtlasError("give the bot a title")
    if not description.strip() or "\n" in description.strip():
        raise AtlasError("the description must be one line")


def create_bot(home: Home, name: str, title: str, description: str, mission: str = "") -> Bot:
    """Write bots/<name>/ and load it into the running home. Nothing is left half-made."""
    check_new_bot(home, name, title, description)
    folder = home.bots_dir / name
    # Staged outside bots/, so a crash never leaves a half-made bot there for the next start.
    staging = home.root / ".staging" / f"bot-{name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for sub in ("memory", "skills", "workspace"):
            (staging / sub).mkdir(parents=True)
        (staging / "bot.toml").write_text(
            f"title = {_toml_string(title.strip())}\n"
            f"description = {_toml_string(description.strip())}\n"
            'mode = "ask"  # ask | auto | read-only\n',
            encoding="utf-8",
        )
        text = mission.strip() or compose_mission(title.strip(), description)
        (staging / "MISSION.md").write_text(text + "\n", encoding="utf-8")
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(folder)  # the whole folder appears at once
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise AtlasError(f"could not create {folder}: {exc}") from exc
    return home.add_bot(name)
