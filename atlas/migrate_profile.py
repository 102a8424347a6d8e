"""Moving a home to the shared profile and the main bot's library (issue 21, items 1 and 2).

Before, each bot kept its own `bots/<name>/memory/USER.md`, and the main bot's skills lived in
`bots/<main>/skills/`. Now the home has one `USER.md` every bot reads, and the main bot's skills
are the home's library `skills/`. `migrate_home` runs at every home load and at `atlas init`;
once a home is migrated it finds nothing to do. It never deletes anything: each file it moves or
merges is kept first, whole, under `<home>/migrated/<UTC stamp>/` (the same relative path).

- Each bot's USER.md entries join `<home>/USER.md`, main bot first, then by name; an entry that
  is already there (same words, case and spacing aside) is not added twice.
- Each skill of `bots/<main>/skills/` moves into `<home>/skills/`, unless the library has a
  skill of that name: then the library's stays, and the bot's is only in the kept copy (the
  report names the clash). Deleted skills (`.archive/`) move to the library's archive.
"""

from __future__ import annotations

import shutil
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from atlas.locks import held

MIGRATED = "migrated"
USER_FILE = "USER.md"


def _entries(path: Path) -> list[str]:
    from atlas.tools.memory import read_entries

    return read_entries(path)


def _key(entry: str) -> str:
    return " ".join(entry.split()).casefold()


def _main_from_config(root: Path) -> str:
    try:
        data = tomllib.loads((root / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return "atlas"
    main = data.get("main", "atlas")
    return main if isinstance(main, str) else "atlas"


class _Migration:
    def __init__(self, root: Path, main: str) -> None:
        self.root = root
        self.main = main
        self.backup = root / MIGRATED / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.report: list[str] = []

    def keep(self, path: Path) -> Path:
        """Copy a file or folder into the backup, at its path relative to the home."""
        copy = self.backup / path.relative_to(self.root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, copy, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(path, copy)
        return copy

    def profiles(self) -> None:
        bots = self.root / "bots"
        names = sorted(p.parent.parent.name for p in bots.glob(f"*/memory/{USER_FILE}"))
        names.sort(key=lambda name: name != self.main)  # the main bot's entries come first
        if not names:
            return
        from atlas.tools.memory import _write_atomically, render

        shared = self.root / USER_FILE
        with held(shared):
            merged = _entries(shared)
            seen = {_key(e) for e in merged}
            for name in names:
                own = bots / name / "memory" / USER_FILE
                added = [e for e in _entries(own) if _key(e) not in seen]
                seen.update(_key(e) for e in added)
                merged.extend(added)
                if added:
                    _write_atomically(shared, render(merged))  # before the original moves
                copy = self.keep(own)
                own.unlink()
                self.report.append(
                    f"USER.md of bot {name!r}: {len(added)} entries merged into {shared} "
                    f"(the original is kept in {copy})"
                )

    def skills(self) -> None:
        old = self.root / "bots" / self.main / "skills"
        if not old.is_dir():
            return
        library = self.root / "skills"
        library.mkdir(exist_ok=True)
        if any(old.iterdir()):
            copy = self.keep(old)
            for folder in sorted(p for p in old.iterdir() if p.is_dir()):
                if folder.name == ".archive":
                    self._archives(folder, library / ".archive")
                elif folder.name.startswith("."):
                    continue  # a staging folder left by a crash: only in the kept copy
                elif (library / folder.name).exists():
                    self.report.append(
                        f"skill {folder.name!r} of the main bot {self.main!r} was not moved: "
                        f"the library has {library / folder.name}; the bot's version is kept "
                        f"in {copy / folder.name}"
                    )
                else:
                    folder.rename(library / folder.name)
                    self.report.append(
                        f"skill {folder.name!r} of the main bot moved into {library}"
                    )
        shutil.rmtree(old)

    def _archives(self, source: Path, target: Path) -> None:
        target.mkdir(exist_ok=True)
        for archived in sorted(source.iterdir()):
            if not (target / archived.name).exists():
                archived.rename(target / archived.name)


def _work_to_do(root: Path, main: str) -> bool:
    bots = root / "bots"
    return (bots / main / "skills").is_dir() or any(bots.glob(f"*/memory/{USER_FILE}"))


def migrate_home(root: Path, main: str | None = None) -> list[str]:
    """Bring a home to the shared USER.md and the main bot's library; what was done, one line
    each (nothing once migrated). `main` defaults to config.toml's."""
    root = root.expanduser()
    main = main or _main_from_config(root)
    if not _work_to_do(root, main):
        return []  # the usual case, checked without taking the lock or writing anything
    migration = _Migration(root, main)
    with held(root / MIGRATED):  # two processes loading one home migrate it once
        migration.profiles()
        migration.skills()
    return migration.report
