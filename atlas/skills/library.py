"""Skills on disk: `skills/<name>/SKILL.md` (YAML frontmatter, then instructions) and its files.

The home's library (`<home>/skills/`) holds the main bot's skills. Any other bot sees its own
(`bots/<name>/skills/`) plus the library skills its bot.toml lists (`skills = [...]`; absent: all);
its own skill wins on a name clash. Folders starting with "." (archives, history, staging) are not
skills. Skills written for Claude Code work as they are: their `allowed-tools` names are mapped to
Atlas's tools (see atlas/skills/claude_code.py).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from atlas.agent.tokens import count_tokens
from atlas.config import SKILL_NAME_PATTERN
from atlas.errors import AtlasError

SKILL_FILE = "SKILL.md"
SUBFOLDERS = ("references", "templates", "scripts", "assets")
SKILL_NAME = re.compile(SKILL_NAME_PATTERN)
INDEX_DESCRIPTION_CHARS = 60
MAX_LISTED_FILES = 100
# A shared opening shorter than this is left in: stripping it would save little and lose context.
MIN_SHARED_OPENING = 16
_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)

Origin = Literal["home", "bot"]

log = logging.getLogger(__name__)
# The problem last logged for each skill folder with its SKILL.md's modification time: the
# library is read every round, and a broken skill is logged once per change, not each time.
_logged_problems: dict[Path, tuple[int, str]] = {}


class SkillError(AtlasError):
    """A skill folder or SKILL.md is malformed, or a skill operation was refused."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    folder: Path
    origin: Origin
    allowed_tools: tuple[str, ...] = ()

    @property
    def skill_file(self) -> Path:
        return self.folder / SKILL_FILE

    def instructions(self) -> str:
        """SKILL.md without its frontmatter."""
        _, body = split_frontmatter(self.skill_file.read_text(encoding="utf-8"), self.skill_file)
        return body.strip()

    def files(self) -> list[str]:
        """The skill's other files, relative to its folder (hidden ones and symlinks left out)."""
        found: list[str] = []
        for path in sorted(self.folder.rglob("*")):
            relative = path.relative_to(self.folder)
            if any(part.startswith(".") for part in relative.parts) or path.is_symlink():
                continue
            if path.is_file() and relative.as_posix() != SKILL_FILE:
                found.append(relative.as_posix())
        return found


@dataclass
class Library:
    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # skills that could not be read, and why
    unreadable: list[str] = field(default_factory=list)  # those skills' folder names


def check_skill_name(name: str) -> str:
    if not SKILL_NAME.fullmatch(name):
        raise SkillError(
            f"skill name {name!r} is not allowed: use 1-64 lowercase letters, digits, '-' and "
            "'_', starting with a letter or digit"
        )
    return name


def split_frontmatter(text: str, where: Path | str) -> tuple[dict[str, Any], str]:
    """YAML frontmatter (a dict) and the body after it; raises SkillError naming the fault."""
    import yaml

    match = _FRONTMATTER.match(text)
    if not match:
        raise SkillError(
            f"{where}: SKILL.md must start with YAML frontmatter between '---' lines "
            "(name, description)"
        )
    try:
        data = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 2}" if mark is not None else ""
        raise SkillError(f"{where}: frontmatter is not valid YAML{line}: {exc}") from None
    if not isinstance(data, dict):
        raise SkillError(f"{where}: frontmatter must be a mapping of keys to values")
    return data, text[match.end() :]


def parse_allowed_tools(value: object) -> list[str]:
    """`allowed-tools` as a YAML list or a string ("Read, Grep, Bash(git:*)") → entries."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return re.findall(r"[A-Za-z_][\w.-]*(?:\([^)]*\))?", str(value))


def load_skill(folder: Path, origin: Origin) -> Skill:
    """Read a skill folder's SKILL.md; raises SkillError naming what is wrong."""
    path = folder / SKILL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SkillError(f"{folder}: no {SKILL_FILE}") from None
    except UnicodeDecodeError:
        raise SkillError(f"{path}: not UTF-8 text") from None
    meta, _ = split_frontmatter(text, path)
    name = str(meta.get("name") or folder.name)
    if name != folder.name:
        raise SkillError(f"{path}: frontmatter name {name!r} differs from its folder's name")
    description = " ".join(str(meta.get("description") or "").split())
    return Skill(
        name=check_skill_name(name),
        description=description,
        folder=folder,
        origin=origin,
        allowed_tools=tuple(parse_allowed_tools(meta.get("allowed-tools"))),
    )


def _skill_folders(root: Path) -> Iterable[Path]:
    if not root.is_dir():
        return []
    return (
        p
        for p in sorted(root.iterdir())
        if p.is_dir() and not p.name.startswith((".", "_")) and (p / SKILL_FILE).is_file()
    )


def _sources(
    home_skills: Path, bot_skills: Path, listed: Collection[str] | None
) -> list[tuple[Path, Origin, Collection[str] | None]]:
    """(folder, origin, names it may give, None: any). The main bot's own folder is the
    library: then its skills are all its own."""
    if home_skills == bot_skills:
        return [(bot_skills, "bot", None)]
    return [(home_skills, "home", listed), (bot_skills, "bot", None)]


def any_skill(home_skills: Path, bot_skills: Path, listed: Collection[str] | None = None) -> bool:
    """Whether the bot sees a skill. Asked every round (use_skill's availability), so each
    folder's names are kept until its modification time changes (a skill added or removed)."""
    for root, _, allowed in _sources(home_skills, bot_skills, listed):
        names = _skill_names(root, _mtime(root))
        if names if allowed is None else names.intersection(allowed):
            return True
    return False


def _mtime(folder: Path) -> int:
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=256)
def _skill_names(root: Path, mtime_ns: int) -> frozenset[str]:
    return frozenset(folder.name for folder in _skill_folders(root))


def discover(home_skills: Path, bot_skills: Path, listed: Collection[str] | None = None) -> Library:
    """Every readable skill the bot sees: its own, and the library's that `listed` names (None:
    all); its own wins over the library's of the same name."""
    library = Library()
    for root, origin, allowed in _sources(home_skills, bot_skills, listed):
        for folder in _skill_folders(root):
            if allowed is not None and folder.name not in allowed:
                continue
            try:
                skill = load_skill(folder, origin)
            except SkillError as exc:
                library.problems.append(str(exc))
                library.unreadable.append(folder.name)
                _log_problem_once(folder, str(exc))
                continue
            library.skills[skill.name] = skill  # the bot's folder comes second: it wins
    library.skills = dict(sorted(library.skills.items()))
    return library


def _log_problem_once(folder: Path, problem: str) -> None:
    seen = (_mtime(folder / SKILL_FILE), problem)
    if _logged_problems.get(folder) != seen:
        _logged_problems[folder] = seen
        log.warning("skill %s is not loaded: %s", folder, problem)


# ---- the index in use_skill's description ----------------------------------------------------


def _cut(text: str, limit: int = INDEX_DESCRIPTION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _common_prefix(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def _distinct_parts(descriptions: list[str]) -> list[str]:
    """Each description without the opening it shares with another (cut back to a word's
    start), marked "…": twenty skills that all begin "Use this skill when the user asks about"
    would otherwise read alike once cut at 60 characters. The longest opening a description
    shares with any other is the one it shares with a neighbour in sorted order."""
    order = sorted(range(len(descriptions)), key=lambda i: descriptions[i])
    shared = [0] * len(descriptions)
    for left, right in zip(order, order[1:], strict=False):
        common = _common_prefix(descriptions[left], descriptions[right])
        shared[left] = max(shared[left], common)
        shared[right] = max(shared[right], common)
    parts: list[str] = []
    for text, common in zip(descriptions, shared, strict=True):
        cut = text.rfind(" ", 0, common + 1) + 1 if common < len(text) else 0
        rest = text[cut:].strip()
        parts.append("…" + rest if cut >= MIN_SHARED_OPENING and rest else text)
    return parts


def skill_index(skills: Iterable[Skill], budget_tokens: int) -> str:
    """One line per skill (name: the distinct part of its description, cut at 60 characters)
    within `budget_tokens`; skills that do not fit are named, or counted, on a last line."""
    skills = list(skills)
    descriptions = _distinct_parts([skill.description for skill in skills])
    lines: list[str] = []
    used = 0
    for position, (skill, description) in enumerate(zip(skills, descriptions, strict=True)):
        line = f"- {skill.name}: {_cut(description)}" if description else f"- {skill.name}"
        cost = count_tokens(line + "\n")
        if used + cost > budget_tokens - 12:  # leave room for the "more" line
            rest = skills[position:]
            names = f"+{len(rest)} more: " + ", ".join(s.name for s in rest)
            lines.append(
                names if used + count_tokens(names) <= budget_tokens else f"+{len(rest)} more"
            )
            break
        lines.append(line)
        used += cost
    return "\n".join(lines)
