"""Whether a path a command names lies in the Atlas home outside the bot's workspace.

Paths are matched resolved: `~`, `$HOME`, `$ATLAS_HOME`, the working folder (as `cd` moved it
along the line), `..`, symlinks that exist, and globs matched segment by segment against the
home's real entries (`~/.atl*/con*`, `../*`). The answer is a label for the rule ("settings",
"vault", "database"…) or None.
"""

from __future__ import annotations

import glob
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fnmatch import fnmatchcase

from atlas.trust.command_words import Context, expand

GLOB_CHARS = frozenset("*?[")
SETTINGS = {"config.toml", "mcp.json", "models.toml", "bot.toml", "MISSION.md"}
FOLDERS = {"vault": "vault", "plugins": "plugins", "plugin-data": "plugins", "memory": "memory",
           "skills": "skills", "routines": "routines", "bots": "bots"}  # fmt: skip
# Commands that work through a whole tree: naming a folder above the home reaches into it.
TREE_HEADS = {"rg", "ag", "ack", "tar", "zip", "7z", "rsync", "mv", "scp", "shred", "cpio"}
TREE_WITH_FLAG = {"rm", "cp", "chmod", "chown", "chgrp", "grep", "egrep", "fgrep", "zgrep"}


def has_glob(word: str) -> bool:
    return any(char in GLOB_CHARS for char in word)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# Paths resolved during one judgment. A line of ten parts asked for the same three roots and
# words ~90 times (~27,000 lstat calls in 50 judgments, a third of a judgment's time). Nothing
# is kept across judgments: a link may change between two calls.
_RESOLVED: ContextVar[dict[str, str] | None] = ContextVar("atlas_gate_resolved", default=None)


@contextmanager
def one_judgment() -> Iterator[None]:
    """Within this block, each path is resolved once."""
    token = _RESOLVED.set({})
    try:
        yield
    finally:
        _RESOLVED.reset(token)


def resolved(path: str) -> str:
    """`os.path.realpath` (as written where a link cannot be read), once per judgment."""
    cache = _RESOLVED.get()
    if cache is None:
        return _realpath(path)
    found = cache.get(path)
    if found is None:
        found = cache[path] = _realpath(path)
    return found


def _roots(context: Context) -> tuple[list[str], list[str]]:
    homes = {context.atlas_home, resolved(context.atlas_home)}
    if context.vault:
        homes |= {context.vault, resolved(context.vault)}
    spaces: set[str] = set()
    if context.workspace:
        spaces = {context.workspace, resolved(context.workspace)}
    return sorted(homes), sorted(spaces)


def label(path: str, root: str, context: Context) -> str:
    """The rule label for a path inside `root`: the home (as spelled or resolved) or the vault."""
    if context.vault and root in (context.vault, resolved(context.vault)):
        return "vault"
    home = context.atlas_home
    path = path.replace(root, home, 1)
    rest = path[len(home) :].strip("/") if _inside(path, home) else ""
    names = rest.split("/") if rest else []
    if not names:
        return "folder"
    if names[-1] in SETTINGS:
        return "settings"
    if any(name.startswith(("atlas.db", "conversations.db")) for name in names[-1:]):
        return "database"
    if names[0] == "bots" and len(names) > 2 and names[2] in FOLDERS:
        return FOLDERS[names[2]]
    return FOLDERS.get(names[0], "files")


def touches_home(word: str, context: Context, *, tree: bool = False) -> str | None:
    """The label when `word` names (or, for a globbing word, may name) a home path outside the
    workspace; with `tree`, a folder above the home counts too (it is worked through)."""
    path = expand(word, context)
    if "$" in path:  # `$DIR/.atlas/config.toml` with DIR unknown: the home's own name counts
        return _named_after_unknown(path, context)
    if not path.startswith("/"):
        return _atlas_name_after_lost_cd(path, context)
    homes, spaces = _roots(context)
    if has_glob(path):
        return _glob_touches(path, homes, spaces, context, tree)
    for candidate in {path, resolved(path)}:
        for home in homes:
            if _inside(candidate, home) and not any(_inside(candidate, s) for s in spaces):
                return label(candidate, home, context)
            if tree and _inside(home, candidate):
                return "above"
    return None


# Names only the Atlas home holds: after `cd "$(…)"`, `cat bot.toml` may well be the home's.
ATLAS_NAMES = {"bot.toml", "mcp.json", "atlas.db", "conversations.db", "MISSION.md", "vault",
               "MEMORY.md", "USER.md", "models.toml"}  # fmt: skip


def _atlas_name_after_lost_cd(path: str, context: Context) -> str | None:
    if not context.lost:
        return None
    segments = [s for s in path.split("/") if s not in ("", ".", "..")]
    for index, segment in enumerate(segments[:32]):
        if segment in ATLAS_NAMES or segment in SETTINGS:  # config.toml too, once lost
            return label("/".join([context.atlas_home, *segments[index:]]), context.atlas_home,
                         context)  # fmt: skip
    return None


def _realpath(path: str) -> str:
    """The path with its links resolved, or as written where a link cannot be read (some of
    /proc's, such as /proc/1/root, refuse even root in a container)."""
    try:
        return os.path.realpath(path)
    except OSError:
        return path


def _named_after_unknown(path: str, context: Context) -> str | None:
    home = context.atlas_home
    if not _inside(home, context.user_home) or home == context.user_home:
        return None
    relative = home[len(context.user_home) :].strip("/")  # ".atlas"
    start = path.find(f"/{relative}")
    end = start + len(relative) + 1
    if start == -1 or (end < len(path) and path[end] != "/"):
        return None
    candidate = home + path[end:]
    if context.workspace and _inside(candidate, context.workspace):
        return None
    return label(candidate, home, context)


def _glob_touches(
    pattern: str, homes: list[str], spaces: list[str], context: Context, tree: bool
) -> str | None:
    segments = [s for s in pattern.split("/") if s]
    for home in homes:
        home_segments = [s for s in home.split("/") if s]
        shared = min(len(segments), len(home_segments))
        if not all(fnmatchcase(home_segments[i], segments[i]) for i in range(shared)):
            continue
        if len(segments) == len(home_segments):
            return "folder"
        if len(segments) < len(home_segments):
            if tree:
                return "above"
            continue
        found = _walk(home, segments[len(home_segments) :], spaces)
        if found:
            return label(found, home, context)
        if next(glob.iglob(pattern), None) is None:  # no match: the shell keeps the word as is
            literal = "/".join(["", *home_segments, *segments[len(home_segments) :]])
            if not any(_inside(literal, space) for space in spaces):
                return label(literal, home, context)
    return None


def _walk(base: str, segments: list[str], spaces: list[str]) -> str | None:
    """The first real (or, for a literal name, would-be) path under `base` matching `segments`
    that is not inside a workspace; only folders on the way to a workspace are listed."""
    segment, rest = segments[0], segments[1:]
    if has_glob(segment):
        try:
            names = [n for n in os.listdir(base) if fnmatchcase(n, segment)]
        except OSError:
            names = []
        names = [n for n in names if not n.startswith(".") or segment.startswith(".")]
    else:
        names = [segment]
    for name in names:
        path = posixpath.join(base, name)
        if any(_inside(path, space) for space in spaces):
            continue
        on_the_way = any(_inside(space, path) for space in spaces)
        if not on_the_way or not rest:
            return path
        found = _walk(path, rest, spaces)
        if found:
            return found
    return None


def works_through_trees(head: str, flags: str, words: list[str]) -> bool:
    """True when the command walks whole folders (so a folder above the home reaches into it)."""
    if head in TREE_HEADS:
        return True
    if head in TREE_WITH_FLAG and ("r" in flags.lower() or "a" in flags or "--recursive" in words):
        return True
    return head == "find" and any(w in ("-delete", "-exec", "-execdir") for w in words)


def code_mentions_home(code: str, context: Context) -> str | None:
    """Inline code that names the home: its absolute path, `~/<home>`, or $ATLAS_HOME."""
    home = context.atlas_home
    start = code.find(home)
    while start != -1:
        end = start
        while end < len(code) and code[end] not in "'\"` \n\t,;)]}":
            end += 1
        found = touches_home(code[start:end], context)
        if found:
            return found
        start = code.find(home, end)
    if "ATLAS_HOME" in code:
        return "folder"
    if context.cwd is not None:  # a relative path that climbs out: `open('../bot.toml', 'w')`
        for quote in ("'", '"'):
            start = code.find(quote + "..")
            while start != -1:
                end = code.find(quote, start + 1)
                literal = code[start + 1 : end if end != -1 else len(code)][:4096]
                found = touches_home(literal, context)
                if found:
                    return found
                start = code.find(quote + "..", start + 1)
    if _inside(home, context.user_home) and home != context.user_home:
        relative = home[len(context.user_home) :].strip("/")
        spellings = (f"~/{relative}", f"/{relative}/", f"'{relative}", f'"{relative}')
        if any(spelling in code for spelling in spellings):
            return "folder"
    return None
