"""The command rules: hardline → deny list → outside the machine → dangerous, most severe wins.

No model is called here: a dangerous command gets the verdict "guardian" (the caller asks the
guardian model), which auto mode turns into "allow". Hardline blocks and outside-the-machine
questions hold in auto mode too.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from atlas.config import TrustSettings  # noqa: F401  (re-exported: the [trust] table)
from atlas.trust.command_words import (
    Context,
    arguments,
    clean,
    expand,
    is_catastrophic_target,
    is_redirect,
    is_sensitive,
    is_system_path,
    short_flags,
)
from atlas.trust.normalise import (
    SUBSTITUTION,
    Analysis,
    Part,
    analyse,
    code_parts,
    inline_code,
    interpreter_of,
)
from atlas.trust.subcommands import (
    cloud_read_only,
    destructive_sql,
    find_exec_deletes,
    gh_write,
    git_danger,
)

VerdictKind = Literal["block", "ask", "guardian", "allow"]
SEVERITY: dict[str, int] = {"allow": 0, "guardian": 1, "ask": 2, "block": 3}
# Bytes of a script read through; a larger script is not judged, it goes to the guardian.
SCRIPT_LIMIT = 256 * 1024
SCRIPT_DEPTH = 3  # scripts running scripts, followed this deep

RAW_DEVICE = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|rdisk|md|dm-|mapper/|loop|sr)\w*")
POWER = {"shutdown", "reboot", "halt", "poweroff"}
SYSTEMCTL_POWER = {"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "soft-reboot"}
SQL_CLIENTS = {"psql", "mysql", "mariadb", "sqlite3", "duckdb", "sqlcmd", "clickhouse-client"}
WRITERS = {"cp", "mv", "tee", "install", "ln", "rsync", "truncate", "touch", "rm", "shred",
           "chmod", "chown", "chgrp", "unlink", "dd"}  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    verdict: VerdictKind
    rule: str
    reason: str


ALLOW = Verdict("allow", "ordinary", "no rule matched")


def classify(
    command: str,
    *,
    auto: bool = False,
    deny: list[str] | tuple[str, ...] = (),
    home: Path | None = None,
    cwd: Path | None = None,
    user_home: Path | None = None,
) -> Verdict:
    """Judge a shell command; `home` is the Atlas home, `user_home` the person's (default ~)."""
    if home is None:
        from atlas.home import default_home

        home = default_home()
    context = Context(
        user_home=clean(str(user_home or Path.home())),
        atlas_home=clean(str(home.expanduser())),
        cwd=cwd,
        deny=tuple(deny),
    )
    verdict = _judge(command, context, depth=0)
    if auto and verdict.verdict == "guardian":
        return Verdict("allow", verdict.rule, f"{verdict.reason} (auto mode skips the guardian)")
    return verdict


def _judge(command: str, context: Context, depth: int) -> Verdict:
    analysis = analyse(command)
    found = [_raw_rules(command, analysis)]
    for part in analysis.parts:
        if part.words:
            found.append(_judge_part(part, context))
            found.append(_judge_script(part, context, depth))
    return _worst(found)


def _worst(verdicts: list[Verdict | None]) -> Verdict:
    worst = ALLOW
    for verdict in verdicts:
        if verdict and SEVERITY[verdict.verdict] > SEVERITY[worst.verdict]:
            worst = verdict
    return worst


def _raw_rules(command: str, analysis: Analysis) -> Verdict | None:
    """Rules that need the whole command: fork bombs, process substitution, SQL."""
    squeezed = re.sub(r"\s+", "", command)
    if re.search(r"([\w:.]+)\(\)\{\1\|\1&?\};?\1", squeezed) or ":(){:|:&};:" in squeezed:
        return Verdict("block", "hardline:fork-bomb", "a fork bomb exhausts the machine")
    if analysis.process_substitution:
        return Verdict("guardian", "dangerous:process-substitution", "runs a process substitution")
    if any(part.head == "kill" for part in analysis.parts) and "atlas" in command:
        return Verdict("guardian", "dangerous:stop-daemon", "stops the Atlas daemon")
    if any(part.head in SQL_CLIENTS for part in analysis.parts):
        reason = destructive_sql(command)
        if reason:
            return Verdict("guardian", "dangerous:sql", reason)
    return None


def _judge_part(part: Part, context: Context) -> Verdict | None:
    for step in (_hardline, _denied, _outside, _dangerous):
        verdict = step(part, context)
        if verdict:
            return verdict
    return None


# ---------------------------------------------------------------- hardline


def _hardline(part: Part, context: Context) -> Verdict | None:
    head, words = part.head, part.words

    def block(rule: str, reason: str) -> Verdict:
        return Verdict("block", f"hardline:{rule}", reason)

    if head == "rm":
        recursive = "r" in short_flags(part).lower() or "--recursive" in words
        targets = [expand(w, context) for w in arguments(part)]
        if recursive and "--no-preserve-root" in words:
            return block("rm-root", "rm --no-preserve-root is never run")
        for target in targets:
            if recursive and is_catastrophic_target(target, context):
                return block("rm-root", f"recursive delete of {target}: the system or home folder")
    if head.startswith(("mkfs", "mke2fs", "mkswap", "wipefs")):
        return block("mkfs", "formats a disk")
    for index, word in enumerate(words):
        previous = words[index - 1] if index else ""
        target = None
        if word.startswith("of="):
            target = word[3:]
        elif is_redirect(previous):
            target = word
        elif head in ("tee", "shred", "cp", "cat", "pv") and index and not word.startswith("-"):
            target = word if head != "cat" else None
        if target and RAW_DEVICE.match(target):
            return block("raw-device", f"writes onto the raw device {target}")
    if head == "kill":
        rest = words[1:]
        if rest == ["-1"] or (len(rest) >= 2 and "-1" in rest[1:]):
            return block("kill-all", "kill -1 signals every process")
    if head in POWER:
        return block("power", f"{head} stops the machine")
    if head == "systemctl" and any(w in SYSTEMCTL_POWER for w in words[1:]):
        return block("power", "systemctl stops or restarts the machine")
    if head == "systemctl" and any(
        re.fullmatch(r"(poweroff|reboot|halt)\.target", w) for w in words
    ):
        return block("power", "systemctl stops or restarts the machine")
    if head in ("init", "telinit") and any(w in ("0", "6") for w in words[1:]):
        return block("power", f"{head} changes to a halt or reboot runlevel")
    return None


# ---------------------------------------------------------------- deny list


def _denied(part: Part, context: Context) -> Verdict | None:
    text = part.text
    for glob in context.deny:
        if fnmatch.fnmatchcase(text, glob):
            return Verdict("block", f"deny:{glob}", f"matches the deny-list entry {glob!r}")
    return None


# ---------------------------------------------------------------- outside the machine


def _outside(part: Part, context: Context) -> Verdict | None:
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
    home = context.atlas_home
    guarded = (home + "/plugins", home + "/plugin-data")
    for word in part.words[1:]:
        path = expand(word, context)
        if path == home + "/atlas.db" or path.startswith(home + "/atlas.db-"):
            return ask("home-data", "touches the home's atlas.db")
        if any(path == g or path.startswith(g + "/") for g in guarded):
            return ask("home-data", f"touches the home's {path[len(home) + 1 :].split('/')[0]}/")
    return None


# ---------------------------------------------------------------- dangerous


def _dangerous(part: Part, context: Context) -> Verdict | None:
    head, words = part.head, part.words
    flags = short_flags(part)
    args = arguments(part)

    def guardian(rule: str, reason: str) -> Verdict:
        return Verdict("guardian", f"dangerous:{rule}", reason)

    if head.startswith("$"):
        return guardian("computed-command", "the command's name is only known at run time")
    if head == "rm" and ("r" in flags.lower() or "--recursive" in words):
        return guardian("recursive-delete", "deletes recursively")
    if head in ("rm", "shred", "unlink") and "xargs" in part.wrappers:
        return guardian("xargs-rm", "deletes every file a pipe names")
    if head == "find" and ("-delete" in words or find_exec_deletes(words)):
        return guardian("find-delete", "find deletes what it matches")
    if head == "chmod" and any(re.fullmatch(r"0?777|a\+rwx|ugo\+rwx|o\+w", w) for w in words[1:]):
        return guardian("chmod-777", "makes files writable by everyone")
    if head in ("chmod", "chown", "chgrp") and ("R" in flags or "--recursive" in words):
        targets = [expand(w, context) for w in args[1:]]
        if any(is_system_path(t) or t == context.user_home for t in targets):
            return guardian("chown-system", f"{head} -R on a system or home folder")
    if head == "git":
        reason = git_danger(words)
        if reason:
            return guardian("git", reason)
    if head in ("pkill", "killall"):
        return guardian("pkill", f"{head} stops processes by name")
    if head == "kill" and any("atlas" in w for w in words):
        return guardian("stop-daemon", "stops the Atlas daemon")
    if head in ("systemctl", "service") and any(
        w in ("stop", "kill", "disable", "mask", "restart") for w in words
    ):
        return guardian("service-stop", f"{head} stops or changes a service")
    if head == "atlas" and args[:1] == ["stop"]:
        return guardian("stop-daemon", "stops the Atlas daemon")
    if "sudo" in part.wrappers or "doas" in part.wrappers:
        return guardian("root", "runs as root")
    if head == "crontab" and "-l" not in words:
        return guardian("crontab", "changes scheduled jobs")
    language = interpreter_of(head)
    if language and part.piped_from is not None and not _script_argument(part):
        return guardian("pipe-to-interpreter", f"pipes {part.piped_from} output into {head}")
    if language and inline_code(part) is not None:
        return guardian("inline-code", f"{head} runs inline code")
    if language and part.heredoc is not None:
        return guardian("heredoc-script", f"{head} runs a heredoc script")
    if head == "eval" or (head == "source" and args and args[0] == "/dev/stdin"):
        return guardian("eval", "evaluates a computed string")
    target = _sensitive_write(part, context)
    if target:
        return guardian("sensitive-write", f"writes to {target}")
    if part.origin != "shell" and head == "rm":
        return guardian("code-delete", f"{part.origin} code deletes files")
    return None


def _sensitive_write(part: Part, context: Context) -> str | None:
    words = part.words
    candidates: list[str] = []
    for index, word in enumerate(words[1:], start=1):
        if is_redirect(words[index - 1]):
            candidates.append(word)
    head = part.head
    args = arguments(part)
    if head == "cp" and args:
        candidates.append(args[-1])
    elif head in WRITERS and head != "cp":
        candidates.extend(args)
    elif head in ("sed", "perl") and any(w.startswith(("-i", "--in-place")) for w in words):
        candidates.extend(args[1:])
    for word in words:
        if word.startswith("of="):
            candidates.append(word[3:])
    for candidate in candidates:
        path = expand(candidate, context)
        if is_sensitive(path, context):
            return candidate
    return None


def _script_argument(part: Part) -> str | None:
    """The script file a part runs: `bash x.sh`, `./x.sh`, `python x.py`, `source x`."""
    head, words = part.head, part.words
    if head in ("source", "."):
        return words[1] if len(words) > 1 else None
    if "/" in head and head != SUBSTITUTION:
        return head
    language = interpreter_of(head)
    if language is None or inline_code(part) is not None:
        return None
    rest = words[1:]
    while rest and rest[0].startswith("-"):
        if rest[0] in ("-m", "-", "--"):
            return None  # a module, or code read from stdin
        rest = rest[1:]
    return rest[0] if rest else None


# ---------------------------------------------------------------- scripts


def _judge_script(part: Part, context: Context, depth: int) -> Verdict | None:
    """Read the script a part runs and judge it by the same rules."""
    name = _script_argument(part)
    if name is None or depth >= SCRIPT_DEPTH:
        return None
    expanded = expand(name, context)
    if not expanded.startswith("/"):
        return None  # relative and no working folder: judged by its command line only
    path = Path(expanded)
    try:
        size = path.stat().st_size
        if size > SCRIPT_LIMIT:
            return Verdict("guardian", "dangerous:script", f"{name} is too large to read through")
        data = path.read_bytes()
    except OSError as exc:
        return Verdict("guardian", "dangerous:script", f"{name} could not be read ({exc.strerror})")
    if b"\0" in data[:4096]:
        return None  # a compiled program: nothing to read through
    text = data.decode("utf-8", errors="replace")
    language = interpreter_of(part.head) or _shebang_language(text, path)
    if language in (None, "shell"):
        verdict = _judge(text, context, depth + 1)
    else:
        analysis = Analysis(code_parts(language, text))
        verdict = _worst([_judge_part(p, context) for p in analysis.parts if p.words])
    if verdict.verdict == "allow":
        return None
    return Verdict(verdict.verdict, verdict.rule, f"{name}: {verdict.reason}")


def _shebang_language(text: str, path: Path) -> str | None:
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
