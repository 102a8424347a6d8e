"""What a multi-purpose command is asked to do: git, gh, gcloud/gws, SQL clients and find.

Each function answers with the reason a call is risky (or whether it only reads); the command
rules (atlas/trust/rules.py) turn that into a verdict.
"""

from __future__ import annotations

import re

from atlas.trust.command_words import arguments, option_value
from atlas.trust.parser.interpreters import language_of
from atlas.trust.parser.normalise import Analysis, Part
from atlas.trust.verdict import Verdict

GH_READS = {
    "pr": {"list", "view", "status", "diff", "checks", "checkout"},
    "issue": {"list", "view", "status"},
    "repo": {"view", "list", "clone"},
    "release": {"list", "view", "download"},
    "run": {"list", "view", "watch", "download"},
    "workflow": {"list", "view"},
    "gist": {"list", "view", "clone"},
    "label": {"list"},
    "secret": {"list"},
    "variable": {"list", "get"},
    "search": {"repos", "issues", "prs", "code", "commits"},
    "auth": {"status"},
    "cache": {"list"},
}
GH_FREE = {"help", "--help", "--version", "version", "status", "browse", "completion"}
CLOUD_READ_VERBS = {"list", "describe", "get", "info", "version", "help", "--help", "read",
                    "get-value", "get-iam-policy", "search", "export", "schema", "tail"}  # fmt: skip
CLOUD_WRITE_VERBS = {"create", "delete", "update", "send", "insert", "patch", "modify", "trash",
                     "copy", "move", "deploy", "set", "add", "remove", "import", "batchUpdate",
                     "set-value", "untrash", "share", "upload", "run", "apply", "stop", "start",
                     "reset", "resize", "ssh", "scp"}  # fmt: skip


def destructive_sql(text: str) -> str | None:
    """Why SQL in `text` destroys data (DROP, TRUNCATE, DELETE without WHERE or with a WHERE
    that holds for every row), or None. Comments are read as the server reads them: a space
    (`DROP/**/TABLE`), or, for MySQL's `/*!…*/`, their content."""
    text = sql_without_comments(text[:100_000])
    for statement in re.split(r";", text):
        if re.search(r"\bDELETE\s+FROM\b", statement, re.I) and always_true_where(statement):
            return "deletes every row (its WHERE holds for every row)"
        if re.search(r"\bDROP\s+(TABLE|DATABASE|SCHEMA|VIEW|INDEX|USER)\b", statement, re.I):
            return "drops a database object"
        if re.search(r"\bTRUNCATE\b", statement, re.I):
            return "truncates a table"
        if re.search(r"\bDELETE\s+FROM\b", statement, re.I) and not re.search(
            r"\bWHERE\b", statement, re.I
        ):
            return "deletes every row (DELETE without WHERE)"
    return None


def sql_without_comments(text: str) -> str:
    """`/* … */` as a space (MySQL's `/*! … */` as its content), `-- …` to the line's end."""
    out: list[str] = []
    index = 0
    while index < len(text):
        start = text.find("/*", index)
        dashes = text.find("--", index)
        if start == -1 and dashes == -1:
            out.append(text[index:])
            break
        if dashes != -1 and (start == -1 or dashes < start):
            out.append(text[index:dashes] + " ")
            end = text.find("\n", dashes)
            index = len(text) if end == -1 else end
            continue
        end = text.find("*/", start + 2)
        out.append(text[index:start])
        inner = text[start + 2 : len(text) if end == -1 else end]
        out.append(" " + inner[1:].lstrip("0123456789") + " " if inner.startswith("!") else " ")
        index = len(text) if end == -1 else end + 2
    return "".join(out)


CONSTANT = re.compile(r"\s*(?:-?\d+(?:\.\d+)?|'[^']{0,200}'|\w+)\s*")


def always_true_where(statement: str) -> bool:
    """A WHERE whose condition, or one of its OR branches, compares two equal constants or a
    column with itself (`1=1`, `'a'='a'`, `id=id`), or is a bare true (`TRUE`, `1`)."""
    found = re.search(r"\bWHERE\b", statement, re.I)
    if not found:
        return False
    condition = statement[found.end() : found.end() + 2000]
    for branch in re.split(r"\bOR\b", condition, flags=re.I)[:32]:
        branch = branch.strip()
        for quote in "'\"":  # the shell's closing quote, when the SQL is read from the line
            if branch.count(quote) % 2 and branch.endswith(quote):
                branch = branch[:-1]
        branch = branch.strip().strip("()").strip()
        if branch.upper() in ("TRUE", "1", "NOT FALSE", "NOT 0"):
            return True
        left, equals, right = branch.partition("=")
        if (
            equals
            and CONSTANT.fullmatch(left)
            and CONSTANT.fullmatch(right)
            and left.strip().lower() == right.strip().lower()
        ):
            return True
    return False


def gh_write(part: Part) -> str | None:
    """Why a `gh` call writes to GitHub or prints its token, or None when it only reads."""
    args = arguments(part)
    words = part.words
    if not args or args[0] in GH_FREE:
        if "-t" in words or "--show-token" in words:
            return "prints the GitHub token"
        return None
    group, action = args[0], (args[1] if len(args) > 1 else "")
    if group == "auth":
        if action == "token" or "-t" in words or "--show-token" in words:
            return "prints the GitHub token"
        return None if action in GH_READS["auth"] else f"gh auth {action} changes credentials"
    if group == "api":
        method = option_value(words, ("-X", "--method")) or "GET"
        writes = {"-f", "-F", "--field", "--raw-field", "--input"}
        if method.upper() != "GET" or any(w in writes or w.startswith(("-f", "-F")) for w in words):
            return "gh api call that writes to GitHub"
        return None
    if action in GH_READS.get(group, set()):
        return None
    return f"gh {group} {action}".strip() + " writes to GitHub"


def cloud_read_only(args: list[str]) -> bool:
    """True when a gcloud or gws call's arguments only read."""
    if not args:
        return True
    if any(w in CLOUD_WRITE_VERBS for w in args):
        return False
    return any(w in CLOUD_READ_VERBS for w in args) or args[-1] in ("config", "auth")


def find_exec_deletes(words: list[str]) -> bool:
    """True when `find … -exec rm` (or shred, unlink, rmdir) deletes what it matches."""
    for index, word in enumerate(words):
        runs = words[index + 1 : index + 2]
        deleter = bool(runs) and runs[0].rsplit("/", 1)[-1] in ("rm", "shred", "unlink", "rmdir")
        if word in ("-exec", "-execdir", "-ok", "-okdir") and deleter:
            return True
    return False


def git_danger(words: list[str]) -> str | None:
    """Why a git call discards work or rewrites history, or None."""
    rest = words[1:]
    while rest and rest[0].startswith("-"):  # global options: -C dir, -c k=v, --git-dir=…
        option = rest.pop(0)
        if option in ("-C", "-c") and rest:
            rest.pop(0)
    if not rest:
        return None
    sub, opts = rest[0], rest[1:]
    short = "".join(o[1:] for o in opts if re.fullmatch(r"-[A-Za-z]+", o))
    if sub == "reset" and "--hard" in opts:
        return "git reset --hard discards work"
    if sub == "push" and (
        "f" in short
        or any(o.startswith(("--force", "--mirror", "--delete")) for o in opts)
        or any(o.startswith(("+", ":")) for o in opts[1:] if not o.startswith("-"))
    ):
        return "git push --force rewrites or deletes remote history"
    if sub == "clean" and ("f" in short or "--force" in opts):
        return "git clean -f deletes untracked files"
    if sub == "branch" and ("D" in short or ("--delete" in opts and "--force" in opts)):
        return "git branch -D deletes an unmerged branch"
    if sub in ("checkout", "restore") and "." in opts and (sub == "restore" or "--" in opts):
        return f"git {sub} . discards uncommitted changes"
    if sub == "stash" and opts[:1] in (["drop"], ["clear"]):
        return "git stash drop/clear discards stashed work"
    if sub == "filter-branch":
        return "git filter-branch rewrites history"
    return None


HOST_ROOTS = {"/", "/etc", "/usr", "/var", "/root", "/home", "/boot", "/dev", "/proc", "/sys"}


def build_code(words: list[str]) -> tuple[str, str] | None:
    """`make -f -`, `make -f <(…)`, `make --eval=…`: recipes that cannot be read before they run."""
    head = words[0] if words else ""
    if head in ("make", "gmake", "just", "task", "rake"):
        if set(words) & {"/dev/stdin", "-", "$SUBSTITUTION"}:
            return "piped-code", f"{head} runs recipes it reads from a pipe"
        if any(w.startswith(("--eval", "-E")) for w in words):
            return "computed-code", f"{head} runs recipes written on the line (--eval)"
    awk_file = head in ("awk", "gawk", "mawk", "nawk") and bool({"-f", "--file"} & set(words))
    if awk_file and set(words) & {"/dev/stdin", "-", "$SUBSTITUTION"}:
        return "piped-code", f"{head} runs a program it reads from a pipe"
    return None


def host_container(words: list[str], user_home: str = "") -> tuple[str, str] | None:
    """`docker run -v /:/host …`, `-v ~:/h`, `--privileged`, `--pid=host`, the docker socket: a
    container (or a client) that holds the host, whose commands are not judged here."""
    if "--unix-socket" in words and any(w.endswith("docker.sock") for w in words):
        return "host-container", "talks to the docker daemon (root on the host) directly"
    if words[:1] not in (["docker"], ["podman"]) or not set(words[1:3]) & {"run", "create"}:
        return None
    roots = HOST_ROOTS | {"~", "$HOME", "${HOME}"} | ({user_home} if user_home else set())
    for index, word in enumerate(words):
        if word in ("--privileged", "--pid=host", "--userns=host") or word.startswith("--cap-add"):
            return "host-container", f"the container gets the host ({word}); its commands unjudged"
        following = words[index + 1] if index + 1 < len(words) else ""
        value = following if word in ("-v", "--volume", "--mount") else ""
        value = word.split("=", 1)[1] if word.startswith(("--volume=", "--mount=")) else value
        for key in ("src=", "source="):
            value = value.split(key, 1)[1] if key in value else value
        source = value.split(":", 1)[0].split(",", 1)[0]
        if source and (source.rstrip("/") or "/") in roots or source.endswith("docker.sock"):
            return "host-container", f"the container mounts the host's {source}"
    return None


FETCHING_RUNNERS = {"npx", "bunx", "uvx", "pipx", "npm", "pnpm", "yarn", "bun", "deno", "uv"}


def fetched_program(words: list[str], wrappers: list[str]) -> tuple[str, str] | None:
    """`deno run https://…`, `npx github:x/y`, `uv run https://…/x.py`, `go run x@latest`: code
    fetched when the line runs, never read here."""
    head = words[0] if words else ""
    runner = head if head in ("deno", "bun", "uv", "pipx") else None
    if set(wrappers) & FETCHING_RUNNERS or runner:
        for word in words[: 1 if not runner else 4]:
            if "://" in word or word.startswith(("github:", "git+", "gitlab:", "file:")):
                return "fetched-code", f"runs code fetched from {word}"
    if head == "go" and words[1:2] == ["run"] and any("@" in w for w in words[2:]):
        return "fetched-code", "go run builds and runs a module fetched from the network"
    return None


def hidden_program(words: list[str], wrappers: list[str], user_home: str) -> tuple[str, str] | None:
    """Code the line runs that cannot be read: recipes from a pipe, a container holding the host,
    a program fetched from the network. (rule key, reason) or None."""
    return build_code(words) or host_container(words, user_home) or fetched_program(words, wrappers)


# A function definition's name, found in linear time: a match starts only where a name starts
# (the look-behind) and a name is at most 64 characters, so no start is retried at length.
# A fork inside any loop, whatever the loop is called (`fork until 0`, `for _ in iter(int, 1):
# os.fork()`, `loop { fork }`, `1.step { fork }`): bounded windows keep it linear.
FORK_LOOP = re.compile(
    r"\bfork\b[^\n;]{0,40}\b(?:while|until|for|foreach|loop|redo)\b"
    r"|\b(?:while|until|for|foreach|loop|iter|repeat|times|each|step|goto|redo)\b[\s\S]{0,80}?\bfork\b"
)
FUNCTION_DEFINITION = re.compile(r"(?<![\w:.\-])([\w:.\-]{1,64})\(\)\{")


def fork_bomb(command: str, analysis: Analysis) -> Verdict | None:
    """A function whose body runs itself in a pipe or twice (`:(){ :|:& };:`, `b(){ b; b; }`).
    Found from the parse (Part.function); a textual check stays for lines that do not parse."""
    bomb = Verdict("block", "hardline:fork-bomb", "a fork bomb exhausts the machine")
    calls: dict[str, int] = {}
    for part in analysis.parts:
        function = part.function
        if function and part.head == function:
            if part.piped_from is not None:  # each call a new process in a pipeline
                return bomb
            calls[function] = calls.get(function, 0) + 1
    if any(count >= 2 for count in calls.values()):
        return bomb
    if any(language_of(p.head) not in (None, "shell") for p in analysis.parts) and FORK_LOOP.search(
        command[:100_000]
    ):
        return bomb  # `perl -e 'fork while 1'`, `while 1: os.fork()`
    squeezed = "".join(command.split())
    names = {m.group(1) for m in FUNCTION_DEFINITION.finditer(squeezed[:100_000])}
    for name in list(names)[:64]:
        if f"{name}|{name}" in squeezed or f"{name}&{name}" in squeezed:
            return bomb
    return None
