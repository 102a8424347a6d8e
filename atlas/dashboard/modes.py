"""Changing a bot's gate mode from the dashboard: bot.toml rewritten in place (comments kept),
the live home given the new settings, and the change recorded in the gate's log."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import tomlkit

from atlas.config import BotSettings, Settings, load_bot_settings
from atlas.dashboard.actions import record_action
from atlas.errors import AtlasError
from atlas.home import Home
from atlas.locks import held
from atlas.store.home_db import HomeStore

if TYPE_CHECKING:
    from atlas.tools.registry import ConversationState
    from atlas.workers.dashboard_ops import Workers

BOTS_OWN = "the bot's"  # a conversation without a mode of its own follows its bot's
MODES: tuple[str, ...] = get_args(BotSettings.model_fields["mode"].annotation)


def _write_mode(path: Path, mode: str, settings: Settings) -> BotSettings:
    """bot.toml with `mode` set, checked whole before it replaces the file (blocking)."""
    with held(path):
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
        document["mode"] = mode
        partial = path.with_name(path.name + ".partial")
        partial.write_text(tomlkit.dumps(document), encoding="utf-8")
        try:
            loaded = load_bot_settings(partial, settings)
        except AtlasError:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, path)
    return loaded


async def set_bot_mode(
    home: Home, audit: HomeStore, name: str, mode: str, workers: Workers | None = None
) -> str:
    """Set bot `name`'s default mode; returns the mode it had. Conversations that chose their
    own with /mode keep it; every other turn from now on uses the new one, in every worker
    process too (`workers`: each keeps its own copy of the home's bots)."""
    if mode not in MODES:
        raise AtlasError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    bot = home.bot(name)
    previous = bot.settings.mode
    settings = await asyncio.to_thread(_write_mode, bot.root / "bot.toml", mode, home.settings)
    home.replace_bot_settings(name, settings)
    if workers is not None:
        await workers.bot_settings(name, settings)
    await record_action(
        audit,
        name,
        "mode",
        f"mode {previous} -> {mode}",
        "the person changed the bot's mode on the dashboard",
        rule=f"mode:{mode}",
    )
    return previous


async def set_conversation_mode(
    states: Mapping[tuple[str, int], ConversationState],
    audit: HomeStore,
    bot: str,
    conversation_id: int,
    mode: str,
    workers: Workers | None = None,
) -> str | None:
    """Set (or with "", clear) the mode a conversation chose with /mode, as /mode would: in
    memory until a restart. Returns the mode it had. Only a conversation this daemon holds
    (in this process, or in the worker process holding it)."""
    if mode and mode not in MODES:
        raise AtlasError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    state = states.get((bot, conversation_id))
    if state is not None:
        previous, state.mode = state.mode, mode or None
    elif (
        workers is not None
        and (found := await workers.set_conversation_mode(bot, conversation_id, mode)) is not None
    ):
        previous = found or None
    else:
        raise AtlasError(f"conversation {bot} #{conversation_id} has no state in this daemon")
    await record_action(
        audit,
        bot,
        "mode",
        f"conversation mode {previous or BOTS_OWN} -> {mode or BOTS_OWN}",
        "the person changed the conversation's mode on the dashboard",
        rule=f"mode:{mode or 'bot'}",
        conversation_id=conversation_id,
    )
    return previous
