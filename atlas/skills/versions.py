"""Earlier versions of a skill: kept on every change, restorable.

- a change keeps the previous version whole in `<skill>/.history/<UTC stamp>/` (the last
  KEEP_VERSIONS of them);
- a deletion moves the skill, history included, to `<skills>/.archive/<name>-<UTC stamp>/`;
- a restore swaps the latest history version back in (the current one goes to history, so a
  restore can itself be undone), or brings back the latest archive of a deleted skill.

Folders starting with "." are not skills, so discovery never sees these copies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from atlas.skills.library import SkillError

HISTORY = ".history"
ARCHIVE = ".archive"
KEEP_VERSIONS = 5


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def history_versions(folder: Path) -> list[Path]:
    """Kept versions of a skill, oldest first."""
    root = folder / HISTORY
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def archived_versions(skills_root: Path, name: str) -> list[Path]:
    """Archives of a deleted skill, oldest first."""
    root = skills_root / ARCHIVE
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.glob(f"{name}-*") if p.is_dir() and p.name[len(name) + 1 :][:1].isdigit()
    )


def _prune(folder: Path) -> None:
    for old in history_versions(folder)[:-KEEP_VERSIONS]:
        shutil.rmtree(old)


def install(folder: Path, staged: Path) -> Path | None:
    """Put `staged` (same file system) in place of `folder`, keeping the folder's current
    version in its history; returns where that version went, or None for a new skill."""
    if not folder.exists():
        os.rename(staged, folder)
        return None
    history = folder / HISTORY
    if history.is_dir():
        os.rename(history, staged / HISTORY)
    else:
        (staged / HISTORY).mkdir()
    kept = staged / HISTORY / stamp()
    # Between these two renames the skill is briefly absent: a reader sees it or not, never half.
    os.rename(folder, kept)
    os.rename(staged, folder)
    _prune(folder)
    return folder / HISTORY / kept.name


def archive(folder: Path) -> Path:
    """Move a skill to its skills folder's archive; returns the archive folder."""
    target = folder.parent / ARCHIVE / f"{folder.name}-{stamp()}"
    target.parent.mkdir(exist_ok=True)
    os.rename(folder, target)
    return target


def restore(skills_root: Path, name: str) -> str:
    """Bring back the previous version of a skill, or the last archive of a deleted one."""
    folder = skills_root / name
    if folder.exists():
        versions = history_versions(folder)
        if not versions:
            raise SkillError(
                f"skill {name!r} has no earlier version to restore ({folder / HISTORY})"
            )
        staging = Path(tempfile.mkdtemp(dir=skills_root, prefix=".staging-"))
        try:
            staged = staging / name
            os.rename(versions[-1], staged)
            install(folder, staged)
        finally:
            # Empty when all went well; after a failed rename it holds the version: keep it.
            with contextlib.suppress(OSError):
                staging.rmdir()
        return f"restored {name!r} to its version of {versions[-1].name}; the replaced one is kept"
    archives = archived_versions(skills_root, name)
    if not archives:
        raise SkillError(f"no skill {name!r} and no archive of it in {skills_root / ARCHIVE}")
    os.rename(archives[-1], folder)
    return f"restored the deleted skill {name!r} from {archives[-1].name}"
