"""The home's databases checked before Atlas uses them (`atlas run`, `chat`, `search`).

The header check (damage.py) catches garbage and truncation; damage in the middle of a file
shows only to SQLite's `quick_check`, which reads every page. So each start runs it on each
database within a time budget, and remembers a file found intact while its size and time stay
the same (`run/integrity.json`): a healthy home starts fast, a changed file is checked again.
A home Atlas cannot write (a read-only mount) or a file it cannot read is named as such, never
as damage.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from atlas.errors import AtlasError
from atlas.store.damage import DamagedDatabase, damaged_message, header_problem, is_damage

if TYPE_CHECKING:
    from atlas.home import Home

log = logging.getLogger(__name__)

CHECK_BUDGET_S = 3.0  # for every database of one start together; the rest waits for the next
PROGRESS_STEPS = 10_000  # SQLite instructions between two looks at the clock
CACHE_NAME = "integrity.json"


class HomeNotWritable(AtlasError):
    """The home (or one of its databases) cannot be written: read-only, or not ours."""


@dataclass(frozen=True)
class Verdict:
    state: Literal["ok", "damaged", "unreadable", "unfinished"]
    detail: str = ""


def check_file(path: Path, deadline: float) -> Verdict:
    """`quick_check` of one existing file, read-only, stopped at `deadline` (`unfinished`)."""
    if problem := header_problem(path):
        unreadable = problem.startswith("it cannot be read")
        return Verdict("unreadable" if unreadable else "damaged", problem)
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return Verdict("damaged" if is_damage(exc) else "unreadable", str(exc))
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
    try:
        rows = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        if "interrupted" in str(exc):
            return Verdict("unfinished")
        return Verdict("damaged" if is_damage(exc) else "unreadable", f"SQLite says: {exc}")
    finally:
        conn.close()
    if rows == ["ok"]:
        return Verdict("ok")
    more = f" (and {len(rows) - 3} more)" if len(rows) > 3 else ""
    return Verdict("damaged", "quick_check found: " + "; ".join(rows[:3]) + more)


def _stamp(path: Path) -> str:
    """What changes when the file (or its write-ahead log) does."""
    parts = []
    for file in (path, path.with_name(path.name + "-wal")):
        try:
            st = file.stat()
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
    return "/".join(parts)


def not_writable(path: Path) -> str | None:
    """Why Atlas cannot write here (a read-only file system, permissions), or None."""
    if os.access(path, os.W_OK):
        return None
    try:
        statvfs = os.statvfs(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if statvfs.f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    return "this user may not write it (check its owner and permissions)"


def check_home(home: Home, *, budget: float = CHECK_BUDGET_S) -> None:
    """Raise HomeNotWritable, DamagedDatabase or AtlasError (unreadable) naming the file and
    the way out; a file found intact is remembered until it changes. A home whose store is
    PostgreSQL (`[store] url`) opens none of its SQLite files: only its folder is checked (a
    file left from before `atlas store migrate` does not stop it)."""
    databases = [home.db_path, *(bot.db_path for bot in home.bots.values())]
    if home.settings.store.url is not None:
        databases = []
    for path in (home.root, *(p for p in databases if p.exists())):
        if why := not_writable(path):
            raise HomeNotWritable(
                f"{path} cannot be written: {why}. Atlas keeps its databases and sockets in "
                f"the home; make it writable, or run with another home (--home DIR). Nothing "
                "was changed."
            )
    cache_path = home.root / "run" / CACHE_NAME
    known = _read_cache(cache_path)
    deadline = time.monotonic() + budget
    intact: dict[str, str] = {}
    for path in databases:
        if not path.exists():
            continue
        stamp = _stamp(path)
        if known.get(str(path)) == stamp:
            intact[str(path)] = stamp
            continue
        verdict = check_file(path, deadline)
        if verdict.state == "damaged":
            raise DamagedDatabase(damaged_message(path, verdict.detail))
        if verdict.state == "unreadable":
            raise AtlasError(
                f"{path} cannot be read ({verdict.detail}); it is not damaged as far as Atlas "
                "can tell: check the file's owner and permissions, and that its folder is "
                "writable (SQLite keeps -wal and -shm files beside it)"
            )
        if verdict.state == "unfinished":
            log.info("%s: integrity check left for later (over its %g s budget)", path, budget)
            continue
        intact[str(path)] = stamp
    if intact != known:  # nothing learnt: nothing written (a refused start changes nothing)
        _write_cache(cache_path, intact)


def remember_clean_stop(home: Home) -> None:
    """After a clean stop: the files found intact at start, as Atlas left them, need no check
    at the next start (without this, every start would check every file again, since each
    run writes them)."""
    cache_path = home.root / "run" / CACHE_NAME
    known = _read_cache(cache_path)
    _write_cache(cache_path, {name: _stamp(Path(name)) for name in known if Path(name).exists()})


def _read_cache(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_cache(path: Path, intact: dict[str, str]) -> None:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.write_text(json.dumps(intact, indent=1))
    except OSError as exc:  # a cache: the next start checks again
        log.warning("could not remember the integrity checks in %s: %s", path, exc)
