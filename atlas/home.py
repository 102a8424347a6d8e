"""The home folder: config, bots and their files, and where runtime data lives."""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from atlas.config import NAME_PATTERN, BotSettings, Settings, load_bot_settings, load_settings
from atlas.errors import AtlasError, ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger(__name__)


def default_home() -> Path:
    return Path(os.environ.get("ATLAS_HOME") or Path.home() / ".atlas").expanduser()


def check_bot_name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise AtlasError(
            f"bot name {name!r} is not allowed: use lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Bot:
    name: str
    root: Path
    settings: BotSettings
    home: Home

    @property
    def mission_path(self) -> Path:
        return self.root / "MISSION.md"

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def skills_dir(self) -> Path:
        """Where this bot's own skills live: the home's library for the main bot, which owns
        it; `bots/<name>/skills/` for any other."""
        return self.home.skills_dir if self.is_main else self.root / "skills"

    @property
    def listed_skills(self) -> list[str] | None:
        """The library skills this bot sees besides its own (bot.toml `skills`; None: all)."""
        return None if self.is_main else self.settings.skills

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def db_path(self) -> Path:
        return self.root / "conversations.db"

    @property
    def model(self) -> str:
        return self.settings.model or self.home.settings.model

    @property
    def fallback_model(self) -> str | None:
        return self.settings.fallback_model or self.home.settings.fallback_model

    @property
    def is_main(self) -> bool:
        return self.name == self.home.settings.main

    def mission(self) -> str:
        try:
            return self.mission_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return ""

    def ensure_folders(self) -> None:
        for folder in (self.memory_dir, self.skills_dir, self.workspace):
            folder.mkdir(parents=True, exist_ok=True)


class Home:
    """A home folder. Loading it validates config.toml and every bot.toml up front, so the
    daemon never starts half-configured."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        if not self.config_path.exists():
            raise AtlasError(
                f"no Atlas home at {self.root} (missing config.toml); create one with `atlas init`"
            )
        self.settings: Settings = load_settings(self.config_path)
        self.bots: dict[str, Bot] = self._load_bots()
        # The bots this process serves (its channels, stores, lanes): all of them, unless
        # `atlas run` spread them over worker processes (atlas/workers/).
        self.served: frozenset[str] = frozenset(self.bots)
        # The bots whose channels run in this process: the served ones, less a spread bot's
        # (its conversations are spread over the workers, its channels stay in its owner).
        self.owned: frozenset[str] = frozenset(self.bots)
        if self.settings.main not in self.bots:
            raise ConfigError(
                f"{self.config_path}: main = {self.settings.main!r}, but there is no "
                f"{self.bots_dir / self.settings.main / 'bot.toml'}"
            )
        from atlas.migrate_profile import migrate_home

        try:
            for line in migrate_home(self.root, self.settings.main):
                log.warning("home layout migrated: %s", line)  # once: the person should see it
        except OSError as exc:  # e.g. a read-only home: it loads as it is; the next load retries
            log.warning("could not migrate the home's layout (USER.md, skills): %s", exc)
        self._check_listed_skills()

    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    @property
    def bots_dir(self) -> Path:
        return self.root / "bots"

    @property
    def routines_dir(self) -> Path:
        return self.root / "routines"

    @property
    def skills_dir(self) -> Path:
        """The home's skill library: the main bot's skills, which other bots may list."""
        return self.root / "skills"

    @property
    def user_profile_path(self) -> Path:
        """USER.md, who the user is: one profile every bot reads and writes (`memory` user)."""
        return self.root / "USER.md"

    @property
    def db_path(self) -> Path:
        return self.root / "atlas.db"

    @property
    def documents_dir(self) -> Path:
        """Markdown text of documents, cached for find_files and read_file."""
        return self.root / "documents"

    @property
    def spill_dir(self) -> Path:
        """Whole tool results too large for the model's context."""
        return self.root / "spill"

    @property
    def jobs_dir(self) -> Path:
        """Output of background commands (the tool reference's `commands/`)."""
        return self.root / "commands"

    def _check_listed_skills(self) -> None:
        """A bot.toml `skills` entry the library lacks is a warning, not an error: the main bot
        may create that skill later, and the bot sees it from then on."""
        for bot in self.bots.values():
            if bot.is_main and bot.settings.skills is not None:
                log.warning(
                    "%s: `skills` is ignored for the main bot: the library is its own",
                    bot.root / "bot.toml",
                )
                continue
            missing = [n for n in bot.settings.skills or [] if not (self.skills_dir / n).is_dir()]
            if missing:
                log.warning(
                    "%s: skills = %s: not in the library %s (yet)",
                    bot.root / "bot.toml",
                    ", ".join(missing),
                    self.skills_dir,
                )

    def _load_bots(self) -> dict[str, Bot]:
        bots: dict[str, Bot] = {}
        if not self.bots_dir.is_dir():
            return bots
        for folder in sorted(self.bots_dir.iterdir()):
            if not (folder / "bot.toml").exists():
                continue
            try:
                check_bot_name(folder.name)
            except AtlasError as exc:
                raise ConfigError(f"{folder}: {exc}; rename the folder") from None
            # With the home's settings, so a bot's model must name a defined provider.
            settings = load_bot_settings(folder / "bot.toml", self.settings)
            bots[folder.name] = Bot(folder.name, folder, settings, self)
        return bots

    def add_bot(self, name: str) -> Bot:
        """Load a bot whose folder was just written (bot_create), so it is live without a
        restart. Refuses a name already loaded."""
        check_bot_name(name)
        if name in self.bots:
            raise AtlasError(f"bot {name!r} is already loaded from {self.bots[name].root}")
        folder = self.bots_dir / name
        settings = load_bot_settings(folder / "bot.toml", self.settings)
        bot = Bot(name, folder, settings, self)
        bot.ensure_folders()
        self.bots[name] = bot
        return bot

    @cached_property
    def main_bot(self) -> Bot:
        return self.bots[self.settings.main]

    def replace_bot_settings(self, name: str, settings: BotSettings) -> None:
        """The live home's copy of a bot, with new settings (a mode changed on the dashboard)."""
        self.bots[name] = replace(self.bot(name), settings=settings)
        self.__dict__.pop("main_bot", None)  # the cached_property holds the old Bot

    def served_bots(self) -> list[Bot]:
        return [bot for name, bot in self.bots.items() if name in self.served]

    def owned_bots(self) -> list[Bot]:
        return [bot for name, bot in self.bots.items() if name in self.owned]

    def bot(self, name: str | None) -> Bot:
        if name is None:
            return self.main_bot
        if name not in self.bots:
            known = ", ".join(self.bots) or "none"
            raise AtlasError(f"no bot named {name!r} in {self.bots_dir} (bots: {known})")
        return self.bots[name]


def init_home(root: Path, source: Path = REPO_ROOT) -> list[Path]:
    """Copy config.example.toml, bots/ and routines/ into a home; never overwrite a file.
    Returns the files created."""
    root = root.expanduser()
    if not (source / "config.example.toml").is_file():
        raise AtlasError(
            f"the examples `atlas init` copies are not at {source}: run it from a checkout of "
            "Atlas (`uv run atlas init`), where config.example.toml, bots/ and routines/ live"
        )
    created: list[Path] = []

    def copy(src: Path, dst: Path) -> None:
        if dst.exists():
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        created.append(dst)

    copy(source / "config.example.toml", root / "config.toml")
    for folder in ("bots", "routines"):
        base = source / folder
        if base.is_dir():
            for src in sorted(p for p in base.rglob("*") if p.is_file()):
                copy(src, root / folder / src.relative_to(base))
    for sub in ("skills",):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for bot_toml in (root / "bots").glob("*/bot.toml"):
        # No skills/ here: the main bot's skills are the home's library, and another bot's
        # folder is made with it (atlas/newbot.py) or at its first skill.
        for sub in ("memory", "workspace"):
            (bot_toml.parent / sub).mkdir(exist_ok=True)
    return created
