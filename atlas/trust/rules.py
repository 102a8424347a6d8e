"""The command rules: hardline → deny list → outside the machine → the Atlas home → dangerous,
most severe wins; and whatever the parser could not resolve ("opaque") is asked.

No model is called here: a dangerous command gets the verdict "guardian" (the caller asks the
guardian model), which auto mode turns into "allow". Hardline blocks, and the questions for
opaque lines, sending outside and touching the home, hold in auto mode too.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
from pathlib import Path

from atlas.config import TrustSettings  # noqa: F401  (re-exported: the [trust] table)
from atlas.trust.command_words import (
    Context,
    arguments,
    clean,
    created_venvs,
    expand,
    is_catastrophic_target,
    is_system_path,
    quoted_globs,
    sensitive_write,
    short_flags,
    without_unknowns,
    written_paths,
)
from atlas.trust.home_paths import one_judgment
from atlas.trust.options import canonical_words
from atlas.trust.outside import metadata_address
from atlas.trust.parser.interpreters import script_argument
from atlas.trust.parser.normalise import (
    SUBSTITUTION,
    Analysis,
    Part,
    analyse,
    inline_code,
    interpreter_of,
)
from atlas.trust.parser.parse_words import is_redirect
from atlas.trust.program_files import judge_program_files
from atlas.trust.reach import destroy_verdict, home_verdict, outside_verdict, raw_home_verdict
from atlas.trust.rules_more import (
    computed_kill,
    data_loss,
    destroy_more,
    hardline_more,
    unreadable_more,
)
from atlas.trust.scripts import Judges, judge_script, written_build_file
from atlas.trust.subcommands import (
    destructive_sql,
    find_exec_deletes,
    fork_bomb,
    git_danger,
    hidden_program,
)
from atlas.trust.taint import taint_verdict
from atlas.trust.verdict import Verdict
from atlas.trust.verdict import worst as _worst

FORMATTERS = {"mkfs", "mke2fs", "mkswap", "wipefs"}  # and mkfs.<type>: mkfs.ext4, mkfs.xfs…
ROOT_WRAPPERS = {"sudo", "doas", "su", "runuser", "pkexec", "run0", "sudoedit"}
FANOUT_WRAPPERS = {"xargs", "parallel", "find"}  # run a command once per name they are given
RAW_DEVICE = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|rdisk|md|dm-|mapper/|loop|sr)\w*")
POWER = {"shutdown", "reboot", "halt", "poweroff"}
SYSTEMCTL_POWER = {"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "soft-reboot"}
SQL_CLIENTS = {"psql", "mysql", "mariadb", "sqlite3", "duckdb", "sqlcmd", "clickhouse-client"}


def classify(
    command: str,
    *,
    auto: bool = False,
    deny: list[str] | tuple[str, ...] = (),
    home: Path | None = None,
    cwd: Path | None = None,
    user_home: Path | None = None,
    workspace: Path | None = None,
    vault: Path | None = None,
) -> Verdict:
    """Judge a shell command; `home` is the Atlas home, `user_home` the person's (default ~),
    `workspace` the bot's workspace (the one place in the home commands may use freely) and
    `vault` the vault when it is configured outside the home."""
    if home is None:
        from atlas.home import default_home

        home = default_home()
    context = Context(
        user_home=clean(str(user_home or Path.home())),
        atlas_home=clean(str(home.expanduser())),
        cwd=cwd,
        deny=tuple(deny),
        workspace=clean(str(workspace.expanduser())) if workspace else None,
        vault=clean(str(vault.expanduser())) if vault else None,
    )
    with one_judgment():  # each path resolved once in this judgment (home_paths.py)
        verdict = _judge(command, context, depth=0)
    if auto and verdict.verdict == "guardian":
        return Verdict("allow", verdict.rule, f"{verdict.reason} (auto mode skips the guardian)")
    return verdict


def _judge(command: str, context: Context, depth: int, analysis: Analysis | None = None) -> Verdict:
    analysis = analysis if analysis is not None else analyse(command)
    found = [_raw_rules(command, analysis), fork_bomb(command, analysis), *_opaque(analysis)]
    found.append(computed_kill(analysis.parts))
    judges = Judges(_judge, _judge_part)
    written: set[str] = set()
    venvs: set[str] = set()  # made on this line: their bin/ scripts come from Python itself
    here = context
    for part in analysis.parts:
        if part.words:
            found.append(_judge_part(part, here))
            found.append(judge_script(part, here, depth, written, venvs, judges))
            found.append(judge_program_files(part, here, depth, written, judges))
            found.append(written_build_file(part, here, written))
            written |= written_paths(part, here)
            venvs |= created_venvs(part, here)
            here = _after_cd(part, here)
    found.append(raw_home_verdict(command, context))  # after the parts: theirs name the command
    found.append(taint_verdict(command, analysis, context))  # a file read, then sent out
    if depth > 0:  # a script on disk: its variables are set by whoever runs it
        found = [_soften(verdict) for verdict in found]
    return _worst(found)


# In a script file (already on disk, read in full), these are ordinary shell: `$PY -m pytest`,
# `"$ROOT/bin/tool"`. They go to the guardian there; hidden code (decoded, fetched, piped) is
# still asked.
SOFT_IN_SCRIPTS = {"computed-command", "computed-code", "eval", "parse-error", "too-deep",
                   "unset-variable", "computed-target"}  # fmt: skip


def _soften(verdict: Verdict | None) -> Verdict | None:
    if verdict is None or verdict.verdict != "ask" or not verdict.rule.startswith("opaque:"):
        return verdict
    key = verdict.rule.removeprefix("opaque:")
    if key not in SOFT_IN_SCRIPTS:
        return verdict
    return Verdict("guardian", f"dangerous:script-{key}", verdict.reason)


def _opaque(analysis: Analysis) -> list[Verdict]:
    """What the parser could not resolve is asked, in every mode: "key: why" → opaque:key."""
    verdicts = []
    for reason in analysis.unresolved:
        key, _, text = reason.partition(": ")
        if not text or not re.fullmatch(r"[a-z0-9-]{1,40}", key):
            key, text = "unresolved", reason
        verdicts.append(Verdict("ask", f"opaque:{key}", text))
    return verdicts


def _raw_rules(command: str, analysis: Analysis) -> Verdict | None:
    """Rules that need the whole command: metadata addresses, process substitution, SQL."""
    address = (
        metadata_address(command)
        or next(  # also as the parser expanded it (`$A.169.254`)
            (a for part in analysis.parts[:200] if (a := metadata_address(" ".join(part.words)))),
            None,
        )
    )
    if address:
        return Verdict(
            "ask", "outside:metadata", f"reads the cloud metadata address {address} (credentials)"
        )
    if analysis.process_substitution:
        return Verdict("guardian", "dangerous:process-substitution", "runs a process substitution")
    if any(part.head == "kill" for part in analysis.parts) and "atlas" in command:
        return Verdict("guardian", "dangerous:stop-daemon", "stops the Atlas daemon")
    if any(part.head in SQL_CLIENTS for part in analysis.parts):
        reason = destructive_sql(command)
        if reason:
            return Verdict("guardian", "dangerous:sql", reason)
    return None


def _after_cd(part: Part, context: Context) -> Context:
    """The context for the parts after a `cd`: relative paths now start from its folder.
    `cd -` goes back to where the line's last `cd` started (unknown when the line has not
    moved: the shell's OLDPWD is not the line's to know); `popd` to a folder not tracked."""
    if part.head == "popd":
        return replace(context, cwd=None, lost=True, oldpwd=context.cwd)
    if part.head not in ("cd", "pushd"):
        return context
    args = [w for w in part.words[1:] if w not in CD_OPTIONS]
    if not args:
        target = context.user_home
    elif args[0] == "-":
        target = str(context.oldpwd) if context.oldpwd is not None else ""
    else:
        target = expand(args[0], context)
    if target.startswith("/"):
        return replace(context, cwd=Path(target), lost=False, oldpwd=context.cwd)
    return replace(context, cwd=None, lost=True, oldpwd=context.cwd)  # computed: unknown


CD_OPTIONS = {"-L", "-P", "-e", "-@", "--"}


def _judge_part(part: Part, context: Context) -> Verdict | None:
    words = canonical_words(part.words)  # `--recur` is `--recursive`, `-01` is `-1`
    if words != part.words:
        part = replace(part, words=words)
    for step in (
        _hardline,
        hardline_more,
        _denied,
        outside_verdict,
        home_verdict,
        destroy_verdict,
        destroy_more,
        _unreadable,
        unreadable_more,
        _dangerous,
    ):
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
        literal = quoted_globs(part)
        targets = [(expand(w, context), w not in literal) for w in arguments(part)]
        if recursive and "--no-preserve-root" in words:
            return block("rm-root", "rm --no-preserve-root is never run")
        for target, glob in targets:
            if recursive and is_catastrophic_target(target, context, glob=glob):
                return block("rm-root", f"recursive delete of {target}: the system or home folder")
    target = _wiped_tree(part, context)
    if target:
        return block("rm-root", f"{head} deletes or moves away {target}: the system or home folder")
    if head in FORMATTERS or head.startswith("mkfs."):
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
        if "1" in [w for w in rest if not w.startswith("-")]:
            return block("kill-all", "kill 1 signals init: every process ends with it")
    if head == "killall5" or (head == "loginctl" and any(w in POWER for w in words[1:])):
        return block("power", f"{head} ends every process or stops the machine")
    if head in POWER:
        return block("power", f"{head} stops the machine")
    if (
        any(
            w == "/proc/sysrq-trigger" and i and is_redirect(words[i - 1])
            for i, w in enumerate(words)
        )
        or (head == "tee" and "/proc/sysrq-trigger" in words)
        or "of=/proc/sysrq-trigger" in words
    ):
        return block("power", "writes to /proc/sysrq-trigger (crash, reboot or power off at once)")
    if head == "systemctl" and any(w in SYSTEMCTL_POWER for w in words[1:]):
        return block("power", "systemctl stops or restarts the machine")
    if head == "systemctl" and any(
        re.fullmatch(r"(poweroff|reboot|halt)\.target", w) for w in words
    ):
        return block("power", "systemctl stops or restarts the machine")
    if head in ("init", "telinit") and any(w in ("0", "6") for w in words[1:]):
        return block("power", f"{head} changes to a halt or reboot runlevel")
    return None


def _wiped_tree(part: Part, context: Context) -> str | None:
    """`find / -delete`, `rsync --delete empty/ ~`, `mv /usr x`: rm -rf by another name."""
    head, words, args = part.head, part.words, arguments(part)
    if head == "find" and ("-delete" in words or find_exec_deletes(words)):
        roots = []
        for word in words[1:]:
            if word.startswith(("-", "(", "!")):
                break
            roots.append(word)
        targets = roots or ["."]
    elif head == "rsync" and any(w.startswith("--del") for w in words) and len(args) >= 2:
        targets = [args[-1]]
    elif head == "mv" and (len(args) >= 2 or any(w.startswith(("-t", "--target")) for w in words)):
        targets = args[:-1] if not any(w.startswith(("-t", "--target")) for w in words) else args
    else:
        return None
    for target in targets:
        path = expand(target, context)
        if is_catastrophic_target(path, context):
            return path
    return None


# ---------------------------------------------------------------- deny list


def _denied(part: Part, context: Context) -> Verdict | None:
    text = part.text
    for glob in context.deny:
        if fnmatch.fnmatchcase(text, glob):
            return Verdict("block", f"deny:{glob}", f"matches the deny-list entry {glob!r}")
    return None


# ---------------------------------------------------------------- unreadable


def _unreadable(part: Part, context: Context) -> Verdict | None:
    """Code only known when the line runs (a computed name, code read from a pipe): asked."""
    head, args = part.head, arguments(part)

    def ask(rule: str, reason: str) -> Verdict:
        return Verdict("ask", f"opaque:{rule}", reason)

    if head.startswith("$"):
        return ask("computed-command", "the command's name is only known at run time")
    piped = part.piped_from is not None and interpreter_of(head) is not None
    if piped and not script_argument(part) and inline_code(part) is None:
        return ask(
            "piped-code",
            f"{head} runs code piped from {part.piped_from}, which cannot be read before it runs",
        )
    if head in ("source", ".") and args and args[0] in ("/dev/stdin", "-", SUBSTITUTION):
        return ask("piped-code", f"{head} runs code it reads from a pipe")
    if head == "eval" and any("$" in word for word in args):
        return ask("eval", "eval runs a string only known at run time")
    recursive = head == "rm" and ("r" in short_flags(part).lower() or "--recursive" in part.words)
    if recursive and not args and part.origin != "shell":  # `os.system('rm -rf ' + path)`
        return ask("computed-target", f"{part.origin} code deletes a path it builds at run time")
    if head == "rm" and part.origin != "shell" and SUBSTITUTION in args:  # os.remove(join(…))
        return ask("computed-target", f"{part.origin} code deletes paths it builds at run time")
    if recursive and {"xargs", "parallel"} & set(part.wrappers):  # names read from a pipe or file
        return ask("computed-target", "rm -r deletes whatever names it is handed at run time")
    for arg in args if recursive else []:
        emptied = without_unknowns(arg)
        if emptied != arg and emptied.strip("/*.") == "":
            return ask("computed-target", f"rm -r {arg}: what it deletes is only known at run time")
        if emptied != arg and is_catastrophic_target(expand(emptied, context), context):
            return ask("unset-variable", f"rm -r {arg} deletes / or a home folder if it is empty")
    found = hidden_program([head, *part.words[1:]], part.wrappers, context.user_home)
    return ask(*found) if found else None


# ---------------------------------------------------------------- dangerous


def _dangerous(part: Part, context: Context) -> Verdict | None:
    head, words = part.head, part.words
    flags = short_flags(part)
    args = arguments(part)

    def guardian(rule: str, reason: str) -> Verdict:
        return Verdict("guardian", f"dangerous:{rule}", reason)

    if head == "rm" and ("r" in flags.lower() or "--recursive" in words):
        return guardian("recursive-delete", "deletes recursively")
    if head in ("rm", "shred", "unlink", "rmdir") and FANOUT_WRAPPERS & set(part.wrappers):
        return guardian("xargs-rm", "deletes every file it is handed")
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
    if ROOT_WRAPPERS & set(part.wrappers) or head in ROOT_WRAPPERS:
        return guardian("root", "runs as root")
    lost = data_loss(part)
    if lost:
        return guardian("sql", lost)
    if head == "crontab" and "-l" not in words:
        return guardian("crontab", "changes scheduled jobs")
    language = interpreter_of(head)
    if language and inline_code(part) is not None:
        return guardian("inline-code", f"{head} runs inline code")
    if language and part.heredoc is not None:
        return guardian("heredoc-script", f"{head} runs a heredoc script")
    if head == "eval":
        return guardian("eval", "evaluates a string as a command")
    target = sensitive_write(part, context)
    if target:
        return guardian("sensitive-write", f"writes to {target}")
    if part.origin != "shell" and head == "rm":
        return guardian("code-delete", f"{part.origin} code deletes files")
    return None
