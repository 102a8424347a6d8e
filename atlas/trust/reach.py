"""Where a command reaches: outside the machine, the Atlas home outside the bot's workspace, and
what it destroys outside the workspace (each asked every time), as verdicts for rules.py."""

from __future__ import annotations

import posixpath
import re

from atlas.trust.command_words import (
    Context,
    arguments,
    expand,
    is_catastrophic_target,
    is_system_path,
    path_words,
    short_flags,
)
from atlas.trust.home_paths import code_mentions_home, touches_home, works_through_trees
from atlas.trust.outside import code_sends, sends_out
from atlas.trust.parser.interpreters import inline_code, language_of
from atlas.trust.parser.normalise import Part
from atlas.trust.subcommands import cloud_read_only, find_exec_deletes, gh_write
from atlas.trust.verdict import Verdict

# Commands that touch no file: what they name is not read (`cd` moves the working folder,
# which the rules follow instead).
NO_FILE_HEADS = {"true", "false", ":", "which", "type", "command", "cd", "pushd", "popd", "hash"}
# Where a line names a path outside any simple command (`for f in ~/.atlas/*`, `done < file`,
# `exec 3< file`, `xargs -a file`): every word of the raw line that names the home's folder.
RAW_TOKEN = re.compile(r"[^\s'\"`<>|;&()=,]+")


def raw_home_verdict(command: str, context: Context) -> Verdict | None:
    """The Atlas home named anywhere in the line, as a path (the parts' rules name the command)."""
    home = context.atlas_home
    markers = [posixpath.basename(home) or home, "ATLAS_HOME"]
    if context.vault:
        markers.append(posixpath.basename(context.vault) or context.vault)
    for match in RAW_TOKEN.finditer(command):
        token = match.group(0)
        if len(token) > 4096 or not any(marker in token for marker in markers):
            continue
        found = touches_home(token.removeprefix("@"), context)
        if found:
            return Verdict("ask", f"home:{found}", f"the line names {token} in the Atlas home")
    return None


# ---------------------------------------------------------------- outside the machine


def outside_verdict(part: Part, context: Context) -> Verdict | None:
    head, args = part.head, arguments(part)

    def ask(rule: str, reason: str) -> Verdict:
        return Verdict("ask", f"outside:{rule}", reason)

    if head == "gh":
        reason = gh_write(part)
        if reason:
            return ask("gh", reason)
    if head == "gcloud":
        if any("print-access-token" in w or "print-identity-token" in w for w in args):
            return ask("token", "prints a gcloud token")
        if not cloud_read_only(args):
            return ask("gcloud", "gcloud can change cloud resources")
    if head == "gws":
        if (
            any(w in ("token", "export-token", "print-token") for w in args)
            or "--show-token" in part.words
        ):
            return ask("token", "prints a Google Workspace token")
        if not cloud_read_only(args):
            return ask("gws", "gws can change Google Workspace data")
    if head == "atlas" and args[:2] in (["plugins", "enable"], ["plugin", "enable"]):
        return ask("plugins", "enables a plugin")
    found = sends_out(part)
    if found is None and language_of(head) not in (None, "shell"):
        code = code_of(part)
        found = code_sends(code) if code else None
    if found:
        return ask(*found)
    return None


def _atlas_cli(part: Part) -> str | None:
    """`atlas` itself changes the home (bots, routines, plugins…), except what only reads."""
    if part.head != "atlas":
        return None
    args = arguments(part)
    reads = (["trust", "check"], ["trust", "log"], ["search"], ["doctor"], ["version"])
    if not args or any(args[: len(r)] == r for r in reads) or "--help" in part.words:
        return None
    return "cli"


def code_of(part: Part) -> str | None:
    """The code an interpreter part runs inline: `-c`/`-e` code, or a heredoc fed to it."""
    code = inline_code(part, every=True)
    return code if code is not None else part.heredoc


# ---------------------------------------------------------------- the Atlas home


# Reads too: `exec 3< FILE`, `: < FILE`. (?<!\d): linear on a long run of digits.
REDIRECT = re.compile(r"(?<!\d)\d*(?:<<?<?|<>|>>?|&>>?|>\|)")


def home_verdict(part: Part, context: Context) -> Verdict | None:
    """Any path the part reads or writes inside the Atlas home, outside the bot's workspace."""
    if part.head in NO_FILE_HEADS and not any(REDIRECT.fullmatch(w) for w in part.words):
        return None
    tree = works_through_trees(part.head, short_flags(part), part.words)
    found = _atlas_cli(part)
    for word in [] if found else path_words(part):
        found = touches_home(word, context, tree=tree)
        if found:
            break
    if found is None and context.cwd is not None:  # working inside the home itself
        found = touches_home(str(context.cwd), context)
    if found is None and language_of(part.head) not in (None, "shell"):
        code = code_of(part)
        found = code_mentions_home(code, context) if code else None
    if found is None:
        return None
    where = "a folder holding the Atlas home" if found == "above" else "the Atlas home"
    return Verdict(
        "ask", f"home:{found}", f"{part.head} reaches into {where}, outside this bot's workspace"
    )


# ---------------------------------------------------------------- destroying outside the workspace

# Folders where deleting is routine: scratch space and the workspace (checked separately).
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/dev/null")
CREDENTIALS = (".ssh", ".gnupg", ".aws", ".kube", ".docker", ".netrc", ".config/gcloud",
               ".password-store", ".git-credentials", ".pgpass")  # fmt: skip


PERMISSIONS = {"chmod", "chown", "chgrp", "chattr", "setfacl"}
# Partitioning, discarding and formatting tools: given a raw disk, they erase it.
DISK_TOOLS = {"blkdiscard", "parted", "sgdisk", "sfdisk", "fdisk", "cfdisk", "gdisk", "truncate",
              "hdparm", "nvme", "cryptsetup", "mdadm", "zpool", "pvremove", "vgremove",
              "lvremove", "dmsetup", "badblocks", "sg_format"}  # fmt: skip
LISTING = {"-l", "--list", "print", "-p", "--print", "list", "status", "--detail", "-n", "show"}
RAW_DISK = re.compile(r"/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|rdisk|md|dm-|mapper/|loop)")


def destroy_verdict(part: Part, context: Context) -> Verdict | None:
    """A delete, move or wipe of a system folder's contents, a whole folder of the person's home,
    or their credentials: asked in every mode (auto mode would otherwise let it through)."""
    if part.head in DISK_TOOLS and not LISTING & set(part.words[1:]):
        disks = [w for w in part.words[1:] if RAW_DISK.match(w)]
        if disks:
            return Verdict("ask", "destroy:disk", f"{part.head} can erase the disk {disks[0]}")
    for target, recursive in _destroyed(part, context):
        if _inside_any(target, SCRATCH) or (
            context.workspace and _inside_any(target, (context.workspace,))
        ):
            continue
        if any(_inside_any(target, (f"{context.user_home}/{c}",)) for c in CREDENTIALS):
            return Verdict("ask", "destroy:credentials", f"{part.head} destroys {target}")
        if not recursive:
            continue
        if part.head in PERMISSIONS and is_catastrophic_target(target, context):
            return Verdict("ask", "destroy:permissions", f"{part.head} -R locks {target} away")
        if part.head in PERMISSIONS:
            if target.rsplit("/", 1)[0] == context.user_home:
                return Verdict("ask", "destroy:home-folder", f"{part.head} -R locks {target}")
            continue  # `chown -R me /usr/local`: the guardian's
        if is_system_path(target) and not _inside_any(target, (context.user_home,)):
            return Verdict("ask", "destroy:system", f"{part.head} destroys {target}")
        if target.rsplit("/", 1)[0] == context.user_home:
            return Verdict("ask", "destroy:home-folder", f"{part.head} destroys {target}")
    return None


def _inside_any(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _destroyed(part: Part, context: Context) -> list[tuple[str, bool]]:
    """(path, whole tree?) for what the part deletes, moves away, truncates or overwrites."""
    head, words, args = part.head, part.words, arguments(part)
    recursive = "r" in short_flags(part).lower() or "--recursive" in words
    found: list[tuple[str, bool]] = []
    if head in ("rm", "shred", "unlink", "truncate", "srm", "wipe"):
        found = [(a, recursive) for a in args]
    elif head == "mv" and len(args) >= 2:
        found = [(a, True) for a in args[:-1]]
    elif head in PERMISSIONS and recursive and len(args) >= 2:
        found = [(a, True) for a in args[1:]]  # locking a whole tree away is losing it
    elif head in ("cp", "install") and len(args) >= 2:
        found = [(args[-1], False)]  # overwritten
    elif head == "tee" and "-a" not in words and "--append" not in words:
        found = [(a, False) for a in args]
    elif head == "rsync" and any(w.startswith("--delete") for w in words) and len(args) >= 2:
        found = [(args[-1], True)]
    elif head == "find" and ("-delete" in words or find_exec_deletes(words)):
        roots = [w for w in words[1:] if not w.startswith(("-", "(", "!"))][:1]
        found = [(r, True) for r in roots or ["."]]
    found += [(w[3:], False) for w in words if w.startswith("of=")]
    redirects = [words[i] for i in range(1, len(words)) if words[i - 1] in (">", ">|", "&>")]
    found += [(w, False) for w in redirects]
    return [(expand(path, context), tree) for path, tree in found if path]
