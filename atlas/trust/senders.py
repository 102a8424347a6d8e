"""More programs that send data off the machine, and the options by which a network client
reads what it sends from a file or the environment (`curl -H @file`, `--url-query @file`,
`--variable %NAME`). Called by outside.sends_out; each answers `(rule, reason)` or None.

Tables here name programs by what they do (publish, copy to a remote store, open a raw TLS
socket, hand a file to a relay); the rules read their subcommands, not strings in the line.
"""

from __future__ import annotations

from atlas.trust.command_words import arguments
from atlas.trust.parser.normalise import Part

Found = tuple[str, str]

# Talk to another machine directly, whatever the arguments (as nc, telnet, scp do).
DIRECT_CLIENTS = {"gnutls-cli", "gnutls-cli-debug", "rcp", "rsh", "rlogin", "rexec", "remsh",
                  "mosquitto_pub", "kcat", "kafkacat", "wormhole-william"}  # fmt: skip
# Subcommands that send a file, an image or a package out, or delete one held remotely.
SENDING_SUBCOMMANDS: dict[str, set[str]] = {
    "npm": {"unpublish", "deprecate", "dist-tag", "owner", "access", "team", "org", "hook",
            "star", "unstar"},
    "pnpm": {"unpublish", "deprecate", "dist-tag", "owner", "access"},
    "yarn": {"unpublish", "owner", "tag"},
    "croc": {"send"},
    "wormhole": {"send", "ssh"},
    "ffsend": {"upload", "up", "u", "delete", "del"},
    "skopeo": {"copy", "sync", "delete"},
    "crane": {"push", "copy", "cp", "delete", "append", "mutate", "tag", "rebase", "index"},
    "oras": {"push", "attach", "copy", "cp", "tag"},
    "regctl": {"image", "artifact", "tag", "index"},
    "buildah": {"push", "manifest"},
    "nerdctl": {"push"},
    "s5cmd": {"cp", "mv", "rm", "sync", "pipe", "run", "mb", "rb"},
    # MinIO's client (Midnight Commander, also `mc`, takes folders, never these words).
    "mc": {"cp", "mv", "mirror", "rm", "pipe", "put", "sync", "mb", "rb", "share", "alias",
           "admin", "anonymous", "policy", "event", "ilm", "retention", "legalhold", "tag",
           "version", "replicate", "encrypt", "od", "cors", "quota", "batch", "idp"},
}  # fmt: skip
# Read-only forms of the tables above (`regctl image ls`, `buildah manifest inspect`).
READ_SECOND_WORDS = {"ls", "list", "inspect", "digest", "manifest", "config", "get"}
# `docker image push`, `docker manifest push`…: the two words that send an image out.
CONTAINER_PUSHES = {("image", "push"), ("manifest", "push"), ("compose", "push"),
                    ("plugin", "push"), ("trust", "sign"), ("buildx", "imagetools")}  # fmt: skip
CONTAINER_TOOLS = {"docker", "podman", "nerdctl", "buildah"}
# Flake references nix fetches and runs: anything but the local path forms and the registry.
NIX_REMOTE = ("github:", "gitlab:", "sourcehut:", "git+", "http://", "https://", "tarball+",
              "file+http", "hg+", "ssh://")  # fmt: skip
NIX_RUNS = {"run", "shell", "develop", "build", "profile", "flake", "bundle", "copy", "registry",
            "eval", "print-dev-env", "search"}  # fmt: skip
# Name lookups: a name put in one is sent to DNS servers (`getent hosts $(…).example`).
DNS_DATABASES = {"hosts", "ahosts", "ahostsv4", "ahostsv6", "networks"}


def more_sends(part: Part) -> Found | None:
    """Why this part sends data off the machine, for the programs outside.py's tables miss."""
    head, words = part.head, part.words
    args = arguments(part)
    if head in DIRECT_CLIENTS:
        return "socket", f"{head} talks to another machine directly"
    only_reads = len(args) > 1 and args[1] in READ_SECOND_WORDS and head in ("regctl", "buildah")
    sending = head in SENDING_SUBCOMMANDS and args[:1] and args[0] in SENDING_SUBCOMMANDS[head]
    if sending and not only_reads:
        return "publish", f"{head} {args[0]} sends data out or changes what is held remotely"
    if head in CONTAINER_TOOLS and tuple(args[:2]) in CONTAINER_PUSHES:
        return "publish", f"{head} {' '.join(args[:2])} sends an image out"
    if head in CONTAINER_TOOLS and args[:1] in (["build"], ["buildx"]) and _pushes(words):
        return "publish", f"{head} build --push sends the image out"
    if head == "nix" and (reason := _nix_remote(words)):
        return "remote-code", reason
    return None


def is_dns_lookup(part: Part) -> bool:
    """`getent hosts NAME`: a name lookup that goes to the DNS servers."""
    args = arguments(part)
    return part.head == "getent" and bool(args) and args[0] in DNS_DATABASES


def _pushes(words: list[str]) -> bool:
    return "--push" in words or any("type=registry" in w or "push=true" in w for w in words)


def _nix_remote(words: list[str]) -> str | None:
    """`nix run github:owner/repo`: code fetched from elsewhere and run; `nix copy --to URL`
    sends store paths out."""
    if any(w == "--to" or w.startswith("--to=") for w in words) and "copy" in words:
        return "nix copy --to sends store paths to another machine"
    if not NIX_RUNS & set(words[1:3]):
        return None
    for word in words[2:]:
        if word.startswith(NIX_REMOTE):
            return f"nix fetches and runs code from {word}"
    return None


# ---------------------------------------------------------------- data-from-file options

CURL_VALUED = set("AbcCdDeEFHKmoQrtTuUwxXyYzP")  # short options that take a value
# curl's options whose value may be `@file` (read and sent) and what the file becomes.
CURL_FILE_VALUES = {"-H": "headers", "--header": "headers", "--proxy-header": "headers",
                    "--url-query": "the query", "--url": "the addresses"}  # fmt: skip


def curl_reads(words: list[str]) -> str | None:
    """Why curl sends something it reads from a file or the environment, or None:
    `-H @file`, `--url-query name@file`, `--variable name@file`, `--variable %ENV`."""
    for index, word in enumerate(words[1:], start=1):
        following = words[index + 1] if index + 1 < len(words) else ""
        name, value = _option(word, following)
        if name is None:
            continue
        name = "--" + name.removeprefix("--expand-") if name.startswith("--expand-") else name
        if name == "--variable":
            if value.startswith("%"):
                return f"curl --variable {value} puts an environment variable into the request"
            if _names_a_file(value):
                return f"curl --variable {value} puts a file's content into the request"
        elif name in CURL_FILE_VALUES:
            shown = CURL_FILE_VALUES[name]
            if value.startswith("@") or (name == "--url-query" and _names_a_file(value)):
                return f"curl {name} {value} sends a file's content as {shown}"
    return None


def _option(word: str, following: str) -> tuple[str | None, str]:
    """(option name, value) for `--name=value`, `--name value`, `-Hvalue` and `-H value`."""
    if word.startswith("--"):
        name, equals, value = word.partition("=")
        return name, value if equals else following
    if word.startswith("-") and len(word) > 1:  # a cluster: `-sH @f`, `-sH@f`
        for index, letter in enumerate(word[1:], start=2):
            if letter == "H":
                return "-H", word[index:] or following
            if letter in CURL_VALUED:
                break  # the rest of the cluster is another option's value
    return None, ""


def _names_a_file(value: str) -> bool:
    """`@file` and `name@file` (an `@` before any `=`): curl reads the value from the file."""
    value = value.removeprefix("+")  # `+` only turns off URL-encoding
    at, equals = value.find("@"), value.find("=")
    return at != -1 and (equals == -1 or at < equals)
