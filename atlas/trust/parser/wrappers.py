"""Programs that run their arguments as a command, and how to find that command.

The table says, for each wrapper, which options take a value (so a value is not taken for the
command), how many operands come before the command (`timeout 5`, `chroot /new`, `flock file`),
and which options carry a shell string (`su -c`, `flock -c`, `script -c`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from atlas.trust.parser.parse_types import Word
from atlas.trust.parser.wrappers_more import attached_code, bwrap, tmux, xargs


@dataclass(frozen=True)
class Spec:
    valued: frozenset[str] = frozenset()  # options that take the next word as their value
    operands: int = 0  # operands before the command (a duration, a new root, a lock file)
    code: frozenset[str] = frozenset()  # options whose value is a shell string


def spec(valued: str = "", operands: int = 0, code: str = "") -> Spec:
    return Spec(frozenset(valued.split()), operands, frozenset(code.split()))


WRAPPERS: dict[str, Spec] = {
    "sudo": spec("-u -g -h -p -C -U -r -t -D -R -T --user --group --host --prompt --chdir"),
    "doas": spec("-u -C"),
    "nohup": spec(), "setsid": spec(), "command": spec(), "builtin": spec(), "chronic": spec(),
    "dbus-launch": spec("--config-file"), "fakeroot": spec("-l -s -i --lib --faked"),
    "firejail": spec(), "catchsegv": spec(), "unbuffer": spec(), "sg": spec(operands=1, code="-c"),
    "pkexec": spec("--user"), "run0": spec("-u --user -g --group -D --chdir --unit --property"),
    "setpriv": spec("--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps "
                    "--ambient-caps --bounding-set --securebits --pdeathsig --selinux-label "
                    "--apparmor-profile --landlock-access --landlock-rule"), "caffeinate": spec("-t -w"), "xvfb-run": spec("-n -s -f -e -p -w"),
    "proot": spec("-r -b -m -w -q -k -R -S --rootfs --bind --mount --cwd --qemu --kernel-release"),
    "screen": spec("-S -c -e -h -L -Logfile -p -T -t -X"), "newgrp": spec(operands=1),
    "time": spec("-f -o --format --output"),
    "exec": spec("-a"),
    "nice": spec("-n --adjustment"),
    "ionice": spec("-c -n -p -P -u --class --classdata"),
    "chrt": spec("-T -P -D --sched-runtime --sched-period --sched-deadline", operands=1),
    "taskset": spec(operands=1),
    "stdbuf": spec("-i -o -e --input --output --error"),
    "timeout": spec("-s -k --signal --kill-after", operands=1),
    "strace": spec("-e -o -p -s -u -E -a -b -I -O -P -S -X"),
    "ltrace": spec("-e -o -p -s -u -a -n -x -L -F -A -D"),
    "nsenter": spec("-t --target -S -G --setuid --setgid -w --wd -r --root"),
    "unshare": spec("-S -G -R -w --setuid --setgid --root --wd --propagation --map-user"),
    "chroot": spec("--userspec --groups", operands=1),
    "bwrap": spec("--chdir --uid --gid --hostname --dev --proc --tmpfs --mqueue --dir --remount-ro "
                  "--unsetenv --seccomp --info-fd --lock-file --sync-fd --args --cap-add --cap-drop "
                  "--userns --pidns --exec-label --file-label --perms --size --chmod"),
    "flock": spec("-w --timeout -E --conflict-exit-code", operands=1, code="-c --command"),
    "script": spec("-t -T -I -O -B -E -m --timing --log-in --log-out", code="-c --command"),
    "systemd-run": spec(
        "-u --unit -p --property -E --setenv -M --machine -H --host --uid --gid --nice -D "
        "--working-directory --slice --description --on-active --on-calendar --on-boot"
    ),
    "xargs": spec("-I -n -P -d -L -s -E -a --arg-file --max-args --max-procs --delimiter -R"),
    "busybox": spec(), "toybox": spec(), "coproc": spec(),
    "uvx": spec("--from --with --python -p --index --index-url --extra-index-url"),
    "npx": spec("-p --package --registry", code="-c --call"),
    "bunx": spec("-p --package"),
}  # fmt: skip
SUBCOMMAND_WRAPPERS: dict[tuple[str, str], Spec] = {
    ("uv", "run"): spec(
        "--with --with-editable --with-requirements --python -p --project --directory --package "
        "--extra --group --only-group --env-file --index --index-url --extra-index-url --from"
    ),
    ("uv", "tool"): WRAPPERS["uvx"],  # `uv tool run …` (the "run" is skipped as an operand)
    ("pipx", "run"): spec("--spec --python --index-url --pip-args"),
    ("npm", "exec"): WRAPPERS["npx"],
    ("npm", "x"): WRAPPERS["npx"],
    ("npm", "explore"): spec(operands=1),  # `npm explore PKG -- CMD`
    ("yarn", "exec"): WRAPPERS["npx"],
    ("bun", "x"): WRAPPERS["bunx"],
    ("pnpm", "dlx"): WRAPPERS["npx"],
    ("pnpm", "exec"): WRAPPERS["npx"],
    ("yarn", "dlx"): WRAPPERS["npx"],
}
# Packages run by npx & co. that are a shell command in disguise.
EQUIVALENTS = {"rimraf": ["rm", "-rf"], "del-cli": ["rm", "-rf"], "trash-cli": ["rm", "-rf"]}
SU_VALUED = {
    "-s",
    "--shell",
    "-g",
    "--group",
    "-G",
    "--supp-group",
    "-w",
    "--whitelist-environment",
}


@dataclass
class Unwrapped:
    """The command a wrapper runs, the wrappers passed, and shell strings it runs besides."""

    words: list[Word]
    wrappers: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)  # shell strings to judge (su -c, watch …)
    reads_stdin: str | None = None  # a wrapper that runs what it reads on stdin (at, su)
    reads: list[Word] = field(default_factory=list)  # files it reads itself (`xargs -a FILE`)


def name_of(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def unwrap(words: list[Word]) -> Unwrapped:
    """See through leading assignments and wrappers to the command that actually runs."""
    result = Unwrapped(words)
    for _ in range(32):  # wrappers nest; a bound keeps a hostile line finite
        words = _skip_assignments(result.words)
        result.words = words
        if not words:
            return result
        name = name_of(words[0].text)
        second = words[1].text if len(words) > 1 else ""
        if name in ("su", "runuser"):
            return _su(words, result)
        if name == "env":
            result.wrappers.append("env")
            result.words = _env(words[1:])
            continue
        if name == "capsh" and "--" in [w.text for w in words]:
            result.wrappers.append(name)  # `capsh … -- ARGS`: ARGS go to bash
            result.words = [Word("bash"), *words[[w.text for w in words].index("--") + 1 :]]
            continue
        if name == "tmux":
            return tmux(words, result)
        if name == "bwrap":
            result.wrappers.append(name)
            result.words = bwrap(words[1:], WRAPPERS["bwrap"].valued)
            continue
        if name in ("at", "batch"):
            return _at(words, result)
        if name == "watch":
            return _watch(words, result)
        if name == "parallel":
            return _parallel(words, result)
        if name == "command" and second in ("-v", "-V"):
            return result
        if name in ("chrt", "taskset") and any(w.text in ("-p", "--pid") for w in words[1:3]):
            return result
        table = SUBCOMMAND_WRAPPERS.get((name, second))
        if table is not None:
            result.wrappers.append(name)
            words = words[2:] if (name, second) != ("uv", "tool") else words[3:]
        elif name in WRAPPERS:
            table = WRAPPERS[name]
            result.wrappers.append(name)
            words = words[1:]
        else:
            return _translate(result)
        result.words = _after_options(words, table, result)
        if name == "xargs":
            xargs(words, result)
        if not result.words and not result.code and name in STDIN_SHELLS:
            result.reads_stdin = name  # `sudo -s <<< CMD`, `newgrp <<< CMD`: a shell on stdin
            return result
    return result


STDIN_SHELLS = {"sudo", "doas", "sg", "newgrp", "run0", "pkexec"}


def _skip_assignments(words: list[Word]) -> list[Word]:
    index = 0
    while index < len(words) and _is_assignment(words[index].text):
        index += 1
    return words[index:]


def _is_assignment(text: str) -> bool:
    name, equals, _ = text.partition("=")
    return bool(equals) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def _after_options(words: list[Word], table: Spec, result: Unwrapped) -> list[Word]:
    index = 0
    while index < len(words):
        text = words[index].text
        if text == "--":
            index += 1
            break
        if not text.startswith("-") or text == "-":
            break
        option, equals, value = text.partition("=")
        attached = attached_code(text, table.code) if not text.startswith("--") else None
        if attached is not None:  # `flock F -c'CMD'`, `script -qc'CMD'`: the rest is the value
            result.code.append(attached)
            return []
        if not option.startswith("--") and len(option) > 2 and "-" + option[-1] in table.code:
            option = "-" + option[-1]  # `script -qc CMD`: the code flag ends a cluster
        elif not option.startswith("--") and len(option) > 2 and "-" + option[-1] in table.valued:
            option = "-" + option[-1]  # `screen -dmS NAME CMD`: a valued flag ends a cluster
        if option in table.code:
            code = value if equals else (words[index + 1].text if index + 1 < len(words) else "")
            result.code.append(code)
            return []
        index += 2 if (option in table.valued and not equals) else 1
    words = words[index:]
    rest = words[table.operands :] if len(words) > table.operands else []
    if table.operands and rest[:1] and rest[0].text == "--":
        rest = rest[1:]  # `npm explore PKG -- CMD`
    if table.operands and table.code and rest[:1] and rest[0].text.startswith("-"):
        # `flock FILE -c CMD`, `sg GROUP -c CMD`: options may follow the operand too
        return _after_options(rest, replace(table, operands=0), result)
    return rest


def _su(words: list[Word], result: Unwrapped) -> Unwrapped:
    """`su [-] [user] -c CMD`, `runuser -u user -- CMD`, `runuser user -c CMD`."""
    name = name_of(words[0].text)
    result.wrappers.append(name)
    index = 1
    while index < len(words):
        option, equals, value = words[index].text.partition("=")
        if option.startswith("-c") and len(option) > 2 and not option.startswith("--"):
            result.code.append(words[index].text[2:])  # `su -c'CMD'`: getopt's attached value
            index += 1
        elif option in ("-c", "--command", "--session-command"):
            result.code.append(value if equals else _text(words, index + 1))
            index += 1 if equals else 2
        elif name == "runuser" and option in ("-u", "--user"):
            rest = words[index + (1 if equals else 2) :]
            if rest[:1] and rest[0].text.startswith("-") and rest[0].text != "--":
                index += 1 if equals else 2  # `runuser -u root -c CMD`: more options follow
                continue
            rest = rest[1:] if rest[:1] and rest[0].text == "--" else rest
            result.words = rest
            return unwrap_more(result)
        elif option in SU_VALUED:
            index += 1 if equals else 2
        else:
            index += 1
    result.words = []
    if not result.code:
        result.reads_stdin = name  # an interactive shell: runs what comes on stdin
    return result


def unwrap_more(result: Unwrapped) -> Unwrapped:
    inner = unwrap(result.words)
    inner.wrappers = result.wrappers + inner.wrappers
    inner.code = result.code + inner.code
    return inner


def _env(words: list[Word]) -> list[Word]:
    """`env [-i] [-u NAME] [-S "string"] [NAME=value]… command`."""
    index = 0
    while index < len(words):
        option, equals, value = words[index].text.partition("=")
        cluster = option.startswith("-") and not option.startswith("--") and "S" in option
        if cluster and option[1:].index("S") < len(option) - 2:  # `env -vS'CMD'`, `-iSCMD`
            option = "-S" + option[option.index("S") + 1 :]
        elif cluster:
            option = "-S"  # `env -vS 'CMD'`
        if option in ("-S", "--split-string") or (option.startswith("-S") and len(option) > 2):
            string = value if equals else (option[2:] or _text(words, index + 1))
            skip = 1 if (equals or len(option) > 2) else 2
            split = [Word(piece, words[index].glob) for piece in string.split()]
            return split + words[index + skip :]
        if option in ("-u", "--unset", "-C", "--chdir") and not equals:
            index += 2
        elif option == "--":
            return words[index + 1 :]
        elif option.startswith("-") or _is_assignment(words[index].text):
            index += 1
        else:
            break
    return words[index:]


def _at(words: list[Word], result: Unwrapped) -> Unwrapped:
    """`at TIME` and `batch` run the commands they read on stdin (or from `-f FILE`)."""
    result.wrappers.append(name_of(words[0].text))
    texts = [w.text for w in words]
    if "-f" in texts and texts.index("-f") + 1 < len(texts):
        result.words = [Word("sh"), words[texts.index("-f") + 1]]  # a script file, read as such
        return result
    if any(t in ("-l", "-r", "-d", "-c") for t in texts[1:]) or name_of(texts[0]) == "atq":
        result.words = words
        return result
    result.words = []
    result.reads_stdin = name_of(texts[0])
    return result


def _watch(words: list[Word], result: Unwrapped) -> Unwrapped:
    """`watch [-n 2] CMD ARGS…` runs its arguments joined as a shell string (`-x`: as words)."""
    result.wrappers.append("watch")
    index, exec_words = 1, False
    while index < len(words) and words[index].text.startswith("-"):
        option = words[index].text
        exec_words |= option in ("-x", "--exec")
        index += 2 if option in ("-n", "--interval", "-q", "--equexit") else 1
    if exec_words:
        result.words = words[index:]
        return unwrap_more(result)
    result.words = []
    result.code.append(" ".join(w.text for w in words[index:]))
    return result


PARALLEL_VALUED = {"-j", "-S", "--jobs", "-a", "--arg-file", "-n", "-N", "-L", "-d", "-I",
                   "--colsep", "--delay", "--timeout", "--halt", "--joblog", "--results", "-E",
                   "--sshlogin", "--max-args", "--tmpdir", "--workdir", "--env"}  # fmt: skip


def _parallel(words: list[Word], result: Unwrapped) -> Unwrapped:
    """`parallel CMD ::: A B` runs `CMD A`, `CMD B`; with no CMD, each input is a command."""
    result.wrappers.append("parallel")
    index = 1
    while index < len(words) and words[index].text.startswith("-"):
        index += 2 if words[index].text in PARALLEL_VALUED else 1
    texts = [w.text for w in words]
    marks = [i for i, t in enumerate(texts) if t in (":::", "::::", ":::+", "::::+")]
    end = marks[0] if marks else len(words)
    command = [w.text for w in words[index:end]]
    inputs = [t for t in texts[end + 1 :] if t not in (":::", "::::", ":::+")][:16]
    if not marks:
        result.words = []
        if not command:
            result.reads_stdin = "parallel"
        else:
            result.code.append(" ".join(command))
        return result
    for value in inputs or [""]:
        line = " ".join(command)
        if not command:
            result.code.append(value)  # each input is a command
        elif "{}" in line:
            result.code.append(line.replace("{}", value))
        else:
            result.code.append(f"{line} {value}")
    result.words = []
    return result


FETCHED_SPECS = ("github:", "gitlab:", "bitbucket:", "git+", "git:", "file:", "/", "./", "../")


def _translate(result: Unwrapped) -> Unwrapped:
    """`npx rimraf x` is `rm -rf x`; `busybox rm` is `rm`; `pkg@1.2` is `pkg`."""
    words = result.words
    if not words:
        return result
    head = name_of(words[0].text)
    if result.wrappers and result.wrappers[-1] in ("npx", "bunx", "uvx", "npm", "pnpm", "yarn"):
        head = head.lstrip("@").split("/")[-1] if head.startswith("@") else head
        head = head.split("@", 1)[0].split("==", 1)[0]
        taint = words[0].taint
        if "://" in words[0].text or words[0].text.startswith(FETCHED_SPECS):
            taint = taint | {"fetched"}  # `npx github:x/y`, `npx https://…/pkg.tgz`
        result.words = [Word(head, words[0].glob, taint), *words[1:]]
    if head in EQUIVALENTS:
        result.words = [Word(w) for w in EQUIVALENTS[head]] + words[1:]
    return result


def _text(words: list[Word], index: int) -> str:
    return words[index].text if index < len(words) else ""
