"""The HTTP side of the egress proxy: reading one request head (h11), naming its target host in
one canonical spelling, matching it against the allow-list, and the short answers a refusal gets.

A host is normalised before anything is decided about it: percent-decoded, IDNA-encoded (which maps
full-width digits and the ideographic full stop, so `１２７。０。０。１` is `127.0.0.1`), lower-cased,
trailing dot dropped, and the old numeric IPv4 spellings (`2130706433`, `0x7f.1`) written out as
dotted quads. The allow-list and the person are asked about that spelling only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import h11

from atlas.errors import AtlasError

MAX_HEAD_BYTES = 16 * 1024  # request line and headers; more is refused with 431
HEAD_SECONDS = 30.0  # a client that has not finished its request head by then is dropped
# Hop-by-hop headers (RFC 9110 7.6.1) and the proxy's own: never passed to the origin.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_NUMERIC_V4 = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}")
REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class ProxyRefusal(AtlasError):
    """A request the proxy answers itself, with `status` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class ProxyRequest:
    host: str  # normalised (see normalise_host)
    port: int
    tunnel: bool  # CONNECT: answer 200 and splice; else forward `head` to the origin
    head: bytes  # the request head to send to the origin (empty for CONNECT)
    leftover: bytes  # bytes the client sent after its head (a body, or the start of TLS)


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def normalise_host(raw: str) -> str:
    """The one spelling of a host name or address that is matched and asked about."""
    host = unquote(raw).strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            raise ProxyRefusal(400, f"{raw!r}: an address with a zone cannot be reached")
        return str(ip)
    try:
        host = host.encode("idna").decode("ascii").lower().rstrip(".")
    except UnicodeError:
        raise ProxyRefusal(400, f"{raw!r} is not a valid host name") from None
    if _NUMERIC_V4.fullmatch(host):
        try:  # the resolver would read `2130706433` or `0x7f.1` as an address: so do we
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            pass
    try:
        return str(ipaddress.ip_address(host))  # an IPv4 literal spelled with Unicode
    except ValueError:
        pass
    if not _NAME.fullmatch(host):
        raise ProxyRefusal(400, f"{raw!r} is not a valid host name")
    return host


def normalise_pattern(pattern: str) -> str:
    """An allow-list entry: `name`, `*.suffix` or `.suffix` (both: any subdomain of suffix).
    Raises ValueError naming the entry when it is not one (for config validation)."""
    text = pattern.strip()
    wildcard = text.startswith(("*.", "."))
    try:
        host = normalise_host(text.removeprefix("*").removeprefix("."))
    except ProxyRefusal:
        raise ValueError(f"{pattern!r} is not a domain, `*.domain` or an IP address") from None
    if wildcard and is_ip(host):
        raise ValueError(f"{pattern!r}: an IP address cannot have subdomains")
    return f".{host}" if wildcard else host


def on_allow_list(host: str, patterns: Iterable[str]) -> bool:
    """`host` (normalised) is listed exactly, or is a subdomain of a `.suffix` entry; an IP
    address only ever matches itself."""
    for pattern in patterns:
        if pattern == host:
            return True
        if pattern.startswith(".") and host.endswith(pattern) and not is_ip(host):
            return True
    return False


async def read_request(reader: asyncio.StreamReader) -> ProxyRequest | None:
    """The client's first request, or None when it closed before sending one."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    received = 0
    try:
        async with asyncio.timeout(HEAD_SECONDS):
            while (event := conn.next_event()) is h11.NEED_DATA:
                data = await reader.read(1 << 16)
                if not data:
                    return None
                received += len(data)
                conn.receive_data(data)
    except TimeoutError:
        raise ProxyRefusal(400, f"no complete request within {HEAD_SECONDS:g} s") from None
    except h11.RemoteProtocolError as exc:
        if exc.error_status_hint == 431:
            raise ProxyRefusal(431, f"request head larger than {MAX_HEAD_BYTES} bytes") from None
        raise ProxyRefusal(400, f"not an HTTP request this proxy understands ({exc})") from None
    if not isinstance(event, h11.Request):
        raise ProxyRefusal(400, "not an HTTP request")
    leftover = conn.trailing_data[0]
    if received - len(leftover) > MAX_HEAD_BYTES:  # h11 bounds only a head still incomplete
        raise ProxyRefusal(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
    target = event.target.decode("ascii")
    if event.method == b"CONNECT":
        host, port = _authority(target)
        return ProxyRequest(host, port, True, b"", leftover)
    return _absolute_form(event, target, leftover)


def _authority(target: str) -> tuple[str, int]:
    """`host:port` of a CONNECT request (`[v6]:port` for an IPv6 address)."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProxyRefusal(400, f"CONNECT needs host:port, not {target!r}")
    return normalise_host(host), int(port)


def _absolute_form(event: h11.Request, target: str, leftover: bytes) -> ProxyRequest:
    """A plain-HTTP request through the proxy (`GET http://host/path`), rewritten for the
    origin: origin-form target, its own Host, hop-by-hop headers dropped, one request only."""
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        hint = " (https goes through CONNECT)" if parts.scheme == "https" else ""
        raise ProxyRefusal(400, f"this is a proxy: it takes http://host/... or CONNECT{hint}")
    try:
        port = parts.port or 80
    except ValueError:
        raise ProxyRefusal(400, f"bad port in {target!r}") from None
    host = normalise_host(parts.hostname)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    dropped = HOP_BY_HOP | _connection_tokens(event.headers.raw_items())
    lines = [b"%s %s HTTP/%s" % (event.method, path.encode(), event.http_version)]
    lines.append(b"Host: " + authority.encode())
    lines += [
        name + b": " + value
        for name, value in event.headers.raw_items()
        if name.lower() not in dropped
    ]
    lines.append(b"Connection: close")
    return ProxyRequest(host, port, False, b"\r\n".join(lines) + b"\r\n\r\n", leftover)


def _connection_tokens(headers: Sequence[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Headers the client named in Connection: hop-by-hop as well."""
    return frozenset(
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    )


def answer(status: int, reason: str) -> bytes:
    """A complete response the proxy gives itself, with the reason as its text body."""
    body = (reason + "\n").encode()
    return (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways until both sides have finished; an end on one side is passed on as a
    half-close, and an error on either ends both."""

    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(copy(a[0], b[1]))
            group.create_task(copy(b[0], a[1]))
    except* (ConnectionError, OSError):
        pass  # a reset on one side: both are closed by the caller
