"""A shell command's words as the command rules read them: options, arguments, and the paths
words name (`~`, `$HOME`, `$ATLAS_HOME` and the working folder spelled out), with the kinds of
path the rules care about: system folders, the person's home, sensitive files."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from atlas.trust.parser.interpreters import interpreter_of
from atlas.trust.parser.parameters import expand_braced
from atlas.trust.parser.parse_types import SUBSTITUTION, Part
from atlas.trust.parser.parse_words import is_redirect

SYSTEM_DIRS = {
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/snap",
    "/Users", "/System", "/Library", "/Applications", "/private", "/Volumes",
}  # fmt: skip
WRITERS = {"cp", "mv", "tee", "install", "ln", "rsync", "truncate", "touch", "rm", "shred",
           "chmod", "chown", "chgrp", "unlink", "dd"}  # fmt: skip
SHELL_RC = {
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv",
    ".zprofile", ".zlogin", ".kshrc", ".cshrc", ".tcshrc", ".inputrc", ".gitconfig",
    # read and acted on by other programs at their start: aliases, options that upload or
    # load code, X and session start-up, editors' and multiplexers' start-up files
    ".bash_aliases", ".curlrc", ".wgetrc", ".npmrc", ".yarnrc", ".pypirc", ".pam_environment",
    ".xprofile", ".xinitrc", ".xsession", ".xsessionrc", ".vimrc", ".exrc", ".tmux.conf",
    ".screenrc", ".mailcap", "sitecustomize.py", "usercustomize.py",
}  # fmt: skip
# Folders whose files run at log-in, at a program's start or as services: persistence.
PERSISTENCE_DIRS = ("/.config/git/", "/.config/systemd/", "/.local/share/systemd/",
                    "/.config/autostart/", "/.config/environment.d/", "/.config/fish/",
                    "/.config/nvim/", "/.config/containers/systemd/", "/.git/hooks/")  # fmt: skip


@dataclass(frozen=True)
class Context:
    """Where a command runs: the person's home, the Atlas home, the working folder, deny globs."""

    user_home: str
    atlas_home: str
    cwd: Path | None
    deny: tuple[str, ...]
    workspace: str | None = None  # the bot's workspace: the one place in the home commands use
    vault: str | None = None  # the vault, when it lies outside the home
    lost: bool = False  # a `cd` to a folder only known at run time: relative paths are unknown
    oldpwd: Path | None = None  # the folder before the line's last `cd` (`cd -`, `$OLDPWD`)


# ---------------------------------------------------------------- paths


def clean(path: str) -> str:
    """Collapse `//`, `/./` and `..`; a trailing `/*` names the folder itself."""
    path = re.sub(r"/+", "/", path)
    normal = posixpath.normpath(path) if path else path
    while normal.endswith("/*") or normal == "*":
        normal = normal[:-2] or "/"
    return normal


# `${NAME}`, `${NAME:-default}`, `${NAME:+alternate}`…, and `$NAME` (linear: no nesting).
BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=?+])([^}]*)|[^}]*)\}")
BARE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])")  # and $1, $@, $*…


def expand(word: str, context: Context) -> str:
    """A word as the path it names: `~`, `$HOME`, `${HOME}`, `${HOME:-x}` and $ATLAS_HOME spelled
    out (other variables the parser could not resolve are left as they are)."""
    known = {"HOME": context.user_home, "ATLAS_HOME": context.atlas_home}
    if context.cwd is not None:  # `$PWD/../bot.toml`, `~+/../bot.toml`
        known["PWD"] = str(context.cwd)
        if word == "~+" or word.startswith("~+/"):
            word = "$PWD" + word[2:]
    if context.oldpwd is not None:  # `$OLDPWD`, `~-`: where the line's last `cd` left
        known["OLDPWD"] = str(context.oldpwd)
        if word == "~-" or word.startswith("~-/"):
            word = "$OLDPWD" + word[2:]
    if "$" in word:
        word = expand_braced(word, known)  # `${PWD%/bots/*}`, `${PWD:0:1}`: evaluated
        word = BARE.sub(lambda m: known.get(m.group(1), m.group(0)), word)
    if word == "~" or word.startswith("~/"):
        word = context.user_home + word[1:]
    elif word.startswith("~") and re.match(r"~[a-z_][a-z0-9_-]{0,31}(?:/|$)", word):
        name, _, rest = word[1:].partition("/")  # ~user: root's is /root, others under /home
        own = posixpath.basename(context.user_home) == name
        base = context.user_home if own else ("/root" if name == "root" else f"/home/{name}")
        word = base + ("/" + rest if rest else "")
    if context.cwd is not None and word and not word.startswith(("/", "-", "$")):
        word = str(context.cwd / word)
    return clean(word) if word.startswith("/") else word


def without_unknowns(word: str) -> str:
    """The word with every variable (and `$(…)` placeholder) still unresolved taken as empty."""
    word = BRACED.sub(lambda m: m.group(3) if (m.group(2) or "").endswith("-") else "", word)
    return BARE.sub("", word)


def is_catastrophic_target(path: str, context: Context, *, glob: bool = True) -> bool:
    """`/`, a system folder or the person's home; a glob counts when it could match one
    (`/u*`, `/[u]sr`, `/???`, `/ho*/ali*`), compared segment by segment."""
    catastrophic = {"/", *SYSTEM_DIRS, context.user_home}
    if path in catastrophic or path == "/*":
        return True
    if not glob or not path.startswith("/") or not any(char in path for char in "*?["):
        return False
    pattern = [s for s in path.split("/") if s]
    for target in catastrophic:
        segments = [s for s in target.split("/") if s]
        if len(segments) == len(pattern) and all(
            fnmatch.fnmatchcase(seg, pat) for seg, pat in zip(segments, pattern, strict=True)
        ):
            return True
    return False


def quoted_globs(part: Part) -> set[str]:
    """Words whose `*?[` were quoted (the parser's `Part.globbed` lists the unquoted ones):
    they name a file literally and match nothing."""
    globbed, words = part.globbed, part.words
    return {w for i, w in enumerate(words) if i not in globbed and any(c in w for c in "*?[")}


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
        or name.endswith(".pth")  # Python runs the import lines of every .pth at its start
        or any(folder in path + "/" for folder in PERSISTENCE_DIRS)
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


# ---------------------------------------------------------------- files a command names


def sensitive_write(part: Part, context: Context) -> str | None:
    words = part.words
    candidates: list[str] = []
    for index, word in enumerate(words[1:], start=1):
        if is_redirect(words[index - 1]):
            candidates.append(word)
    head = part.head
    args = arguments(part)
    target_folder = target_directory(part)
    if target_folder is not None:  # `cp -t /etc/cron.d x`, `tar -C /etc -x`, `unzip -d /etc`
        candidates.append(target_folder)
    if head == "cp" and args:
        candidates.append(args[-1])
    elif (head in WRITERS and head != "cp") or head == "sponge":  # sponge: `… | sponge FILE`
        candidates.extend(args)
    elif head in ("sed", "gsed", "perl") and edits_in_place(part):
        candidates.extend(args[1:] if head != "perl" or "-e" not in words else args)
    for word in words:
        if word.startswith("of="):
            candidates.append(word[3:])
    for candidate in candidates:
        path = expand(candidate, context)
        if is_sensitive(path, context):
            return candidate
    return None


TARGET_OPTIONS = {
    "cp": ("-t", "--target-directory"), "mv": ("-t", "--target-directory"),
    "install": ("-t", "--target-directory"), "ln": ("-t", "--target-directory"),
    "tar": ("-C", "--directory"), "unzip": ("-d",), "bsdtar": ("-C", "--directory"),
    "cpio": ("-D", "--directory"), "7z": (), "rsync": (),
}  # fmt: skip


def target_directory(part: Part) -> str | None:
    """The folder a command writes into when an option names it (`-t DIR`, `-tDIR`,
    `--target-directory=DIR`; tar's `-C DIR` when it extracts)."""
    names = TARGET_OPTIONS.get(part.head, ())
    if not names:
        return None
    if part.head in ("tar", "bsdtar") and not _tar_extracts(part.words):
        return None
    words = part.words
    for index, word in enumerate(words[1:], start=1):
        for name in names:
            if word == name and index + 1 < len(words):
                return words[index + 1]
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
            if not name.startswith("--") and word.startswith(name) and len(word) > len(name):
                return word[len(name) :]
    return None


def _tar_extracts(words: list[str]) -> bool:
    first = words[1] if len(words) > 1 else ""
    if first and not first.startswith("-") and "x" in first:  # `tar xzf a.tar`
        return True
    return any(
        w in ("--extract", "--get") or re.fullmatch(r"-[A-Za-z]*x[A-Za-z]*", w) for w in words[1:]
    )


def edits_in_place(part: Part) -> bool:
    """sed or perl editing files in place, in any spelling: `-i`, `-i.bak`, `-Ei`, `-pie`,
    `--in-place`, `-n -i`: an `i` in a cluster before any option that takes a value."""
    takes_value = "ef" if part.head == "perl" else "efl"
    for word in part.words[1:]:
        if word == "--":
            break
        if word.startswith("--in-place"):
            return True
        if word.startswith("-") and not word.startswith("--"):
            for letter in word[1:]:
                if letter == "i":
                    return True
                if letter in takes_value or not letter.isalpha():
                    break
    return False


def shebang_language(text: str, path: Path) -> str | None:
    first = text.split("\n", 1)[0]
    if first.startswith("#!"):
        words = first[2:].split()
        if words:
            head = os.path.basename(words[0])
            if head == "env" and len(words) > 1:
                head = words[1]
            return interpreter_of(head)
    suffix = {".py": "python", ".pl": "perl", ".js": "node", ".rb": "ruby"}
    return suffix.get(path.suffix)


def written_paths(part: Part, context: Context) -> set[str]:
    """Files this part writes (redirects, tee, cp/mv/install/ln targets, downloads, dd of=)."""
    words, head, args = part.words, part.head, arguments(part)
    targets = [words[i] for i in range(1, len(words)) if is_redirect(words[i - 1])]
    if head == "tee":
        targets += args
    elif head in ("cp", "mv", "install", "ln") and len(args) >= 2:
        targets += [args[-1], *(f"{args[-1]}/{Path(a).name}" for a in args[:-1])]
    elif head == "curl":
        targets += [v for v in [option_value(words, ("-o", "--output"))] if v]
        if "-O" in words or "--remote-name" in words:
            targets += [Path(a).name for a in args if "://" in a]
    elif head == "wget":
        given = option_value(words, ("-O", "--output-document"))
        targets += [given] if given else [Path(a).name for a in args if "://" in a]
    elif head in ("sed", "perl", "gsed") and any(
        w.startswith(("-i", "--in-place")) or re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", w)
        for w in words[1:]
    ):
        targets += args  # edited in place: the script and files alike (only names compared)
    elif head in ("npm", "pnpm", "yarn", "bun") and args[:2] == ["pkg", "set"]:
        targets.append("package.json")  # `npm pkg set scripts.test=…`
    targets += [w[3:] for w in words if w.startswith("of=")]
    return {expand(t, context) for t in targets if t}


def created_venvs(part: Part, context: Context) -> set[str]:
    """Folders a line makes into a virtual environment (`python -m venv .venv`, `uv venv`,
    `virtualenv env`): the scripts in them are written by Python itself, not by the line."""
    words, head = part.words, part.head
    rest: list[str] | None = None
    if interpreter_of(head) == "python" and words[1:3] in (["-m", "venv"], ["-m", "virtualenv"]):
        rest = words[3:]
    elif head == "virtualenv" or (head == "uv" and words[1:2] == ["venv"]):
        rest = words[1:] if head == "virtualenv" else words[2:]
    if rest is None:
        return set()
    folders = [w for w in rest if not w.startswith("-")] or [".venv"]
    return {expand(folders[0], context)}


# Files a build or test tool reads and runs code from, by the program that runs them.
BUILD_FILES = {
    "make": ("Makefile", "makefile", "GNUmakefile"), "just": ("justfile", "Justfile"),
    "npm": ("package.json",), "yarn": ("package.json",), "pnpm": ("package.json",),
    "bun": ("package.json",), "npx": ("package.json",), "pytest": ("conftest.py", "pytest.ini"),
    "tox": ("tox.ini",), "cargo": ("build.rs", "Cargo.toml"), "pip": ("setup.py", "pyproject.toml"),
    "task": ("Taskfile.yml",), "rake": ("Rakefile",), "gradle": ("build.gradle",),
    "git": tuple(f".git/hooks/{h}" for h in ("pre-commit", "commit-msg", "prepare-commit-msg",
                 "post-commit", "pre-push", "post-checkout", "post-merge", "pre-rebase")),
}  # fmt: skip


def build_files(part: Part) -> list[str]:
    """The files (relative to the working folder, or given with -f) a build tool runs code from."""
    given = option_value(part.words, ("-f", "--file", "--makefile"))
    if part.head in ("make", "just", "task", "rake") and given:
        return [given]
    return list(BUILD_FILES.get(part.head, ()))


def path_words(part: Part) -> list[str]:
    """Every word that may name a file: the program when it is a path, arguments, redirect
    targets, `--opt=PATH` and `of=PATH` values, and curl's `@file`."""
    words = part.words
    found = [words[0]] if "/" in words[0] else []
    for word in words[1:]:
        if word in ("-", "--") or is_redirect(word) or word == SUBSTITUTION:
            continue
        if "=" in word:
            found.append(word.split("=", 1)[1])
        if word.startswith("@"):
            found.append(word[1:])
        if not word.startswith("-"):
            if ":" in word and "://" not in word:
                found.extend(word.split(":"))  # `-v ~/.atlas:/a`, `host:path`: the parts
            else:
                found.append(word)
        elif re.fullmatch(r"-[A-Za-z][/~.].*", word):  # -o/path, -f~/x
            found.append(word[2:])
    return [w for w in found if w]
