"""Command rules by principle rather than by list (issue 33): the machine's power and run
level whatever interface asks for it, any block device rather than a list of disk names, any
program that makes a file system, volumes and datasets destroyed, databases dropped or emptied
by any client, and kill's targets read as numbers or found unknowable.

rules.py calls `hardline_more`, `destroy_more`, `unreadable_more` and `dangerous_more` next to
its own steps; each answers a Verdict or None.
"""

from __future__ import annotations

import re

from atlas.trust.command_words import Context, arguments, expand, short_flags
from atlas.trust.parser.parse_types import SUBSTITUTION, Part
from atlas.trust.parser.parse_words import is_redirect
from atlas.trust.verdict import Verdict

# Every program that writes a new file system (or swap, or wipes signatures), by its name's
# shape: `mkfs`, `mkfs.<type>`, `mk<type>fs`, `mkdosfs`, `mkntfs`, `newfs_<type>`…
FORMATTER = re.compile(
    r"mkfs(?:\.\w{1,16})?|mke2fs|mk(?:dos|ntfs|exfat|udf|reiser|jfs|fat|hfs|hfsplus|btr|f2|"
    r"minix|nilfs2|xfs|vfat|bfs)fs|mkntfs|mkexfat|mkswap|wipefs|mformat|"
    r"newfs(?:_\w{1,16})?|mkfs_\w{1,16}\.sh"
)
# Device files that are not storage: writing them loses nothing.
HARMLESS_DEVICES = re.compile(
    r"/dev/(?:null|zero|full|u?random|stdin|stdout|stderr|tty\w{0,8}|pts/\w{1,8}|fd/\d{1,4}|"
    r"ptmx|console|kmsg|log|shm/.*|mqueue/.*|tcp/.*|udp/.*)"
)
DEVICE_WRITERS = {"tee", "cp", "pv", "dd", "install"}  # (shred, truncate…: reach.py asks)
# Run levels and targets that stop the machine or everything on it (rescue: single user).
STOPPING_TARGETS = re.compile(
    r"(?:poweroff|reboot|halt|kexec|soft-reboot|rescue|emergency|shutdown|"
    r"runlevel[016]|final|exit)(?:\.target)?"
)
STOPPING_RUNLEVELS = {"0", "1", "6", "s", "S", "single", "emergency", "rescue"}
DBUS_CLIENTS = {"busctl", "dbus-send", "gdbus", "qdbus", "qdbus6", "qdbus-qt5"}
DBUS_POWER = re.compile(
    r"(?:^|[.\s])(?:PowerOff|Reboot|Halt|KExec|SoftReboot|Isolate)(?:WithFlags)?$"
)
VOLUME_DESTROYS = {
    ("zfs", "destroy"), ("zpool", "destroy"), ("zpool", "labelclear"), ("btrfs", "subvolume"),
    ("lvremove", ""), ("vgremove", ""), ("pvremove", ""), ("dmsetup", "remove_all"),
    ("lxc", "delete"), ("virsh", "undefine"),
}  # fmt: skip


def _block(rule: str, reason: str) -> Verdict:
    return Verdict("block", f"hardline:{rule}", reason)


def hardline_more(part: Part, context: Context) -> Verdict | None:
    head, words = part.head, part.words
    rest = words[1:]
    if FORMATTER.fullmatch(head):
        return _block("mkfs", f"{head} formats a disk")
    device = _written_device(part, context)
    if device:
        return _block("raw-device", f"writes onto the device {device}")
    if head == "systemctl" and any(STOPPING_TARGETS.fullmatch(w) for w in rest):
        return _block("power", "systemctl stops the machine or everything on it")
    if head in ("init", "telinit") and any(w in STOPPING_RUNLEVELS for w in rest):
        return _block("power", f"{head} changes to a halt, single-user or reboot run level")
    if head in DBUS_CLIENTS and any(DBUS_POWER.search(w) for w in rest):
        return _block("power", f"{head} asks the system to power off, reboot or change target")
    if head == "kexec" and (
        {"-e", "--exec", "-f", "--force"} & set(rest) or set(short_flags(part)) & {"e", "f"}
    ):
        return _block("power", "kexec starts another kernel at once")
    if head == "kill" and _kills_everything(rest):
        return _block("kill-all", "kill -1 signals every process")
    return None


def _kills_everything(rest: list[str]) -> bool:
    """`kill -9 -1`, `kill -s KILL -1`, `kill -- -1` after numbers were read as numbers."""
    targets = [w for i, w in enumerate(rest) if i and rest[i - 1] not in ("-s", "-n")]
    return "-1" in targets or (rest[:1] == ["--"] and "-1" in rest[1:])


def _written_device(part: Part, context: Context) -> str | None:
    """A path under /dev/ that is not a harmless device, written by dd, a redirect, tee…"""
    words, head = part.words, part.head
    targets = [w[3:] for w in words if w.startswith("of=")]
    targets += [words[i] for i in range(1, len(words)) if is_redirect(words[i - 1])]
    if head in DEVICE_WRITERS and head != "dd":
        targets += [a for a in arguments(part)[1 if head in ("cp", "install") else 0 :]]
    for target in targets:
        if target.startswith("<") or not target:
            continue
        path = expand(target, context)
        if path.startswith("/dev/") and not HARMLESS_DEVICES.fullmatch(path):
            return path
    return None


def destroy_more(part: Part, context: Context) -> Verdict | None:
    """Volumes, datasets and pools destroyed: data outside the workspace, asked."""
    head = part.head
    args = arguments(part)
    for program, verb in VOLUME_DESTROYS:
        if head == program and (not verb or args[:1] == [verb]):
            return Verdict(
                "ask", "destroy:volume", f"{head} {verb} destroys a volume and the data on it"
            )
    return None


def unreadable_more(part: Part, context: Context) -> Verdict | None:
    """Nothing yet per part; see `computed_kill` for what needs the whole line."""
    return None


KILLERS = {"kill", "pkill", "killall"}
# Where a computed pid list may hold every process (or -1): the process table unfiltered,
# numbers made up on the line, names that match everything.
EVERY_PID_SOURCES = {"ps", "seq", "echo", "printf", "jot", "ls", "find", "jobs"}
FILTERS = {"grep", "egrep", "fgrep", "rg", "awk", "gawk", "sed", "head", "tail", "pgrep", "cut"}
EVERYTHING_PATTERNS = {"", ".", ".*", "^", "$", "-v"}


def computed_kill(parts: list[Part]) -> Verdict | None:
    """kill's targets computed from the process table or made up on the line (`kill -9 $(ps
    -eo pid=)`, `kill $(seq 1 99999)`) may be every process: not understood, asked. A pid file
    (`$(cat x.pid)`) or pids found by name (`$(pgrep app)`, `ps … | grep app`) name some."""
    killing = [p for p in parts if p.head in KILLERS and SUBSTITUTION in p.words[1:]]
    if not killing:
        return None
    heads = {p.head for p in parts if p.words}
    everything = any(
        p.head == "pgrep" and EVERYTHING_PATTERNS & set(p.words[1:]) for p in parts
    ) or bool(heads & EVERY_PID_SOURCES and not heads & FILTERS)
    if not everything:
        return None
    return Verdict(
        "ask",
        "opaque:computed-target",
        f"{killing[0].head} signals processes only known at run time (it may be all of them)",
    )


# ---------------------------------------------------------------- data loss (guardian)

REDIS_FLUSH = {"flushall", "flushdb"}
DROPPERS = {"dropdb", "dropuser", "dropuserdb"}


def data_loss(part: Part) -> str | None:
    """Why a database client's call destroys data, or None (SQL text is read by
    subcommands.destructive_sql)."""
    head, words = part.head, part.words
    if head in DROPPERS:
        return f"{head} drops a database"
    if head in ("redis-cli", "valkey-cli", "keydb-cli") and any(
        w.lower() in REDIS_FLUSH for w in words[1:]
    ):
        return "redis FLUSHALL/FLUSHDB deletes every key"
    if head in ("mysqladmin", "mariadb-admin") and "drop" in words[1:]:
        return f"{head} drop deletes a database"
    if head in ("mongo", "mongosh") and any(
        "dropDatabase" in w or ".drop(" in w or "deleteMany({})" in w for w in words
    ):
        return f"{head} drops a database or collection"
    return None
