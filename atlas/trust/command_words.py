"""A shell command's words as the command rules read them: options, arguments, and the paths
words name (`~`, `$HOME`, `$ATLAS_HOME` and the working folder spelled out), with the kinds of
path the rules care about: system folders, the person's home, sensitive files."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from atlas.trust.normalise import Part

SYSTEM_DIRS = {
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/snap",
    "/Users", "/System", "/Library", "/Applications", "/private", "/Volumes",
}  # fmt: skip
SHELL_RC = {
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv",
    ".zprofile", ".zlogin", ".kshrc", ".cshrc", ".tcshrc", ".inputrc", ".gitconfig",
}  # fmt: skip


@dataclass(frozen=True)
class Context:
    """Where a command runs: the person's home, the Atlas home, the working folder, deny globs."""

    user_home: str
    atlas_home: str
    cwd: Path | None
    deny: tuple[str, ...]
    workspace: str | None = None  # the bot's workspace: the one place in the home commands use
    vault: str | None = None  # the vault, when it lies outside the home


# ---------------------------------------------------------------- paths


def clean(path: str) -> str:
    """Collapse `//`, `/./` and `..`; a trailing `/*` names the folder itself."""
    path = re.sub(r"/+", "/", path)
    normal = posixpath.normpath(path) if path else path
    while normal.endswith("/*") or normal == "*":
        normal = normal[:-2] or "/"
    return normal


def expand(word: str, context: Context) -> str:
    """A word as the path it names: `~`, `$HOME`, `${HOME}` and $ATLAS_HOME spelled out."""
    for name, value in (("HOME", context.user_home), ("ATLAS_HOME", context.atlas_home)):
        word = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, word)
    if word == "~" or word.startswith("~/"):
        word = context.user_home + word[1:]
    if context.cwd is not None and word and not word.startswith(("/", "-", "$")):
        word = str(context.cwd / word)
    return clean(word) if word.startswith("/") else word


def is_catastrophic_target(path: str, context: Context) -> bool:
    """`/`, a system folder or the person's home; a glob counts when it could match one
    (`/u*`, `/[u]sr`, `/???`, `/ho*/ali*`), compared segment by segment."""
    catastrophic = {"/", *SYSTEM_DIRS, context.user_home}
    if path in catastrophic or path == "/*":
        return True
    if not path.startswith("/") or not any(char in path for char in "*?["):
        return False
    pattern = [s for s in path.split("/") if s]
    for target in catastrophic:
        segments = [s for s in target.split("/") if s]
        if len(segments) == len(pattern) and all(
            fnmatch.fnmatchcase(seg, pat) for seg, pat in zip(segments, pattern, strict=True)
        ):
            return True
    return False


def is_system_path(path: str) -> bool:
    return path == "/" or any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


def is_sensitive(path: str, context: Context) -> bool:
    """System config, SSH keys, shell rc files and .env files."""
    name = posixpath.basename(path)
    home = context.user_home
    return (
        path.startswith(("/etc/", "/boot/", "/usr/", "/bin/", "/sbin/", "/lib/", "/var/spool/cron"))
        or path == "/etc"
        or path.startswith(home + "/.ssh")
        or "/.ssh/" in path
        or path.endswith("/.ssh")
        or name in SHELL_RC
        or name == ".env"
        or name.startswith(".env.")
    )


# ---------------------------------------------------------------- words


def arguments(part: Part) -> list[str]:
    """Words after the command that are not options."""
    args, options_done = [], False
    for word in part.words[1:]:
        if word == "--" and not options_done:
            options_done = True
        elif options_done or not word.startswith("-"):
            args.append(word)
    return args


def short_flags(part: Part) -> str:
    """The letters of every short option cluster (`-rf -v` → `rfv`)."""
    return "".join(w[1:] for w in part.words[1:] if re.fullmatch(r"-[A-Za-z]+", w))


def option_value(words: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` given (`-X POST` or `--method=POST`)."""
    for index, word in enumerate(words):
        if word in names and index + 1 < len(words):
            return words[index + 1]
        for name in names:
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def is_redirect(word: str) -> bool:
    """`>`, `2>>`, `&>`, `>|`: the next word is a file written to."""
    return re.fullmatch(r"\d*>>?|&>>?|>\|", word) is not None
