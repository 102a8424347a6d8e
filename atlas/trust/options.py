"""A command's options read the way the program reads them (issue 33, principle 1).

GNU getopt_long accepts any unambiguous prefix of a long option (`rm --recur` is
`--recursive`, `git push --forc` is `--force`), so the rules, which compare full names, see the
words after `canonical_words` has spelled each known prefix out. Numbers are read as numbers:
`kill -9 -01` and `kill -9 ' -1'` signal every process, as `kill -9 -1` does.
"""

from __future__ import annotations

import os
import re

# The long options of the programs the rules read, as the programs define them (the ones a
# rule names, and their neighbours, so that a prefix shared with one stays ambiguous).
LONG_OPTIONS: dict[str, tuple[str, ...]] = {
    "rm": ("--recursive", "--force", "--dir", "--interactive", "--one-file-system",
           "--no-preserve-root", "--preserve-root", "--verbose", "--help", "--version"),
    "rsync": ("--delete", "--delete-before", "--delete-during", "--delete-delay",
              "--delete-after", "--delete-excluded", "--delete-missing-args", "--del",
              "--remove-source-files", "--recursive", "--rsh", "--archive", "--dry-run",
              "--verbose", "--exclude", "--exclude-from", "--include", "--include-from"),
    "mv": ("--target-directory", "--backup", "--force", "--interactive", "--no-clobber",
           "--strip-trailing-slashes", "--suffix", "--no-target-directory", "--update",
           "--verbose", "--context", "--exchange", "--no-copy", "--debug", "--help", "--version"),
    "cp": ("--target-directory", "--recursive", "--force", "--archive", "--backup",
           "--no-target-directory", "--no-clobber", "--parents", "--preserve", "--verbose",
           "--remove-destination", "--reflink", "--sparse", "--symbolic-link", "--link",
           "--update", "--dereference", "--no-dereference", "--interactive", "--help"),
    "install": ("--target-directory", "--directory", "--mode", "--owner", "--group",
                "--no-target-directory", "--backup", "--compare", "--verbose", "--strip"),
    "ln": ("--target-directory", "--symbolic", "--force", "--no-target-directory",
           "--no-dereference", "--relative", "--backup", "--verbose", "--interactive"),
    "chmod": ("--recursive", "--reference", "--verbose", "--changes", "--silent", "--quiet",
              "--preserve-root", "--no-preserve-root"),
    "chown": ("--recursive", "--reference", "--verbose", "--changes", "--silent", "--quiet",
              "--preserve-root", "--no-preserve-root", "--dereference", "--no-dereference",
              "--from"),
    "chgrp": ("--recursive", "--reference", "--verbose", "--changes", "--silent", "--quiet",
              "--preserve-root", "--no-preserve-root", "--dereference", "--no-dereference"),
    "sed": ("--in-place", "--expression", "--file", "--line-length", "--null-data",
            "--zero-terminated", "--quiet", "--silent", "--regexp-extended", "--separate",
            "--sandbox", "--unbuffered", "--debug", "--posix", "--follow-symlinks", "--binary",
            "--help", "--version"),
    "tar": ("--directory", "--extract", "--get", "--create", "--list", "--append", "--update",
            "--file", "--to-command", "--use-compress-program", "--checkpoint-action",
            "--checkpoint", "--info-script", "--new-volume-script", "--rsh-command",
            "--verbose", "--gzip", "--exclude", "--strip-components", "--overwrite"),
    "find": (),  # find's options are single-dash words: nothing to expand
    "shred": ("--remove", "--zero", "--iterations", "--force", "--exact", "--size",
              "--verbose", "--random-source"),
    "kexec": ("--exec", "--load", "--force", "--unload", "--kexec-syscall", "--type",
              "--append", "--initrd", "--reuse-cmdline", "--command-line"),
    "xargs": ("--arg-file", "--max-args", "--max-procs", "--delimiter", "--null",
              "--no-run-if-empty", "--replace", "--verbose", "--interactive"),
}  # fmt: skip
GIT_LONG_OPTIONS: dict[str, tuple[str, ...]] = {
    "push": ("--force", "--force-with-lease", "--force-if-includes", "--delete", "--mirror",
             "--all", "--branches", "--tags", "--follow-tags", "--dry-run", "--verbose",
             "--quiet", "--set-upstream", "--no-verify", "--verify", "--atomic", "--prune",
             "--porcelain", "--progress", "--push-option", "--receive-pack", "--repo",
             "--signed", "--no-signed", "--recurse-submodules", "--thin", "--no-thin",
             "--ipv4", "--ipv6", "--exec", "--no-force-with-lease"),
    "reset": ("--hard", "--soft", "--mixed", "--merge", "--keep", "--quiet", "--patch",
              "--intent-to-add", "--recurse-submodules", "--no-recurse-submodules",
              "--pathspec-from-file", "--pathspec-file-nul", "--no-refresh", "--refresh"),
    "clean": ("--force", "--dry-run", "--quiet", "--exclude", "--interactive"),
    "branch": ("--delete", "--force", "--move", "--copy", "--list", "--all", "--remotes",
               "--verbose", "--quiet", "--track", "--no-track", "--set-upstream-to",
               "--unset-upstream", "--edit-description", "--contains", "--no-contains",
               "--merged", "--no-merged", "--sort", "--points-at", "--format", "--color",
               "--no-color", "--column", "--show-current", "--create-reflog", "--abbrev",
               "--ignore-case", "--omit-empty"),
    "checkout": ("--force", "--quiet", "--progress", "--ours", "--theirs", "--track",
                 "--no-track", "--detach", "--orphan", "--merge", "--conflict", "--patch",
                 "--ignore-other-worktrees", "--overwrite-ignore", "--recurse-submodules",
                 "--overlay", "--no-overlay", "--pathspec-from-file", "--guess"),
    "restore": ("--source", "--patch", "--worktree", "--staged", "--quiet", "--progress",
                "--ours", "--theirs", "--merge", "--conflict", "--ignore-unmerged",
                "--ignore-skip-worktree-bits", "--recurse-submodules", "--overlay",
                "--no-overlay", "--pathspec-from-file"),
    "stash": (),
}  # fmt: skip
NUMBER = re.compile(r"\s*([+-]?)0*(\d{1,18})\s*")


def long_option(word: str, known: tuple[str, ...]) -> str:
    """`--recur` → `--recursive` when it is the prefix of exactly one known option (or an exact
    name); `--targ=/tmp` → `--target-directory=/tmp`. Anything else is returned as it is."""
    if not word.startswith("--") or len(word) < 3 or not known:
        return word
    name, equals, value = word.partition("=")
    if name in known:
        return word
    matches = [option for option in known if option.startswith(name)]
    if not matches:
        return word
    if len(matches) > 1:  # `--forc`: --force, --force-with-lease… all share --force; the
        common = os.path.commonprefix(matches)  # rules read every one of them alike
        if common not in known:
            return word  # truly ambiguous: the program refuses it too
        matches = [common]
    return matches[0] + equals + value


def number(word: str) -> str:
    """`-01` → `-1`, `' -1'` → `-1`, `+7` → `7`: a word the program reads as a number, spelled
    the one way the rules compare; other words are returned as they are."""
    found = NUMBER.fullmatch(word)
    if not found:
        return word
    sign = "-" if found.group(1) == "-" else ""
    return sign + str(int(found.group(2)))


NUMERIC_HEADS = {"kill", "init", "telinit", "runlevel"}


def canonical_words(words: list[str]) -> list[str]:
    """The words with known long-option prefixes spelled out and numbers read as numbers."""
    if not words:
        return words
    head = words[0]
    known = LONG_OPTIONS.get(head, ())
    if head == "git":
        sub = _git_subcommand(words)
        known = GIT_LONG_OPTIONS.get(sub, ()) if sub else ()
    out = [head]
    options_done = False
    for word in words[1:]:
        if word == "--":
            options_done = True
        elif not options_done and known:
            word = long_option(word, known)
        if head in NUMERIC_HEADS:
            word = number(word)
        out.append(word)
    return out


def _git_subcommand(words: list[str]) -> str | None:
    index = 1
    while index < len(words) and words[index].startswith("-"):
        index += 2 if words[index] in ("-C", "-c") else 1
    return words[index] if index < len(words) else None
