"""Reaching web pages safely: only http(s), never a private address unless allowed, redirects
followed only within the same site, and every hop checked again.

Host names are resolved by our own resolver (loop.getaddrinfo) inside aiohttp's connector, which
drops refused addresses and hands back only the checked ones: the connection goes to exactly the
address that was checked, so a DNS answer that changes between check and connect (rebinding)
cannot slip a private address through.

A host is normalised exactly as aiohttp will send it (yarl's IDNA/UTS-46 mapping: `127。0。0。1`,
full-width or circled digits and other dots all become `127.0.0.1`) before it is checked, and
legacy numeric IPv4 spellings (`2130706433`, `0x7f.1`, `0177.0.0.1`) are read as the address the
system resolver would make of them. Address literals never reach the resolver, so they are checked
here; every redirect hop is checked again the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from yarl import URL

from atlas.errors import ToolError

if TYPE_CHECKING:
    import aiohttp

    from atlas.config import WebSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Lookup = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> addresses; fakes in tests
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Atlas/0.1"


class AddressRefused(ToolError):
    """A host resolved only to addresses web_fetch may not reach."""


@dataclass(frozen=True)
class AccessPolicy:
    """Which private hosts and networks may be reached (config [web] allow_private)."""

    hosts: frozenset[str]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def from_settings(cls, allow_private: list[str]) -> AccessPolicy:
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in allow_private:
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                hosts.add(entry.strip().lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def refusal(self, host: str, address: str) -> str | None:
        """Why `host` at `address` may not be reached, or None when it may."""
        ip: IPAddress = ipaddress.ip_address(address.split("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
        inner = embedded_ipv4(ip)
        # RFC 8215's local-use NAT64 prefix translates to whatever IPv4 the local translator
        # chooses (often a private one), at no fixed place: Python calls it global; it is not.
        local_nat64 = ip in _LOCAL_NAT64
        # An address that carries an IPv4 one is judged by it: Python before 3.11.10 calls every
        # 6to4 address (2002::/16) non-global, even one wrapping a public address.
        outer_global = ip.is_global or bool(inner)
        if (
            outer_global
            and not local_nat64
            and not ip.is_multicast
            and all(address.is_global for address in inner)
        ):
            return None
        if host.lower().rstrip(".") in self.hosts or any(ip in net for net in self.networks):
            return None
        where = f"{host} is" if host == address else f"{host} resolves to {ip},"
        return (
            f"{where} a private, loopback or link-local address; allow it in config.toml "
            "[web] allow_private if it is meant to be reached"
        )


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries and may be routed to (IPv4-compatible ::a.b.c.d,
    NAT64 64:ff9b::/96, SIIT ::ffff:0:a.b.c.d, 6to4 2002::/16): each must be allowed too."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    value = int(ip)
    found = []
    if 1 < value < 2**32 or ip in _NAT64 or ip in _SIIT:
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    return found


class GuardedResolver:
    """An aiohttp resolver that returns only the addresses the policy allows."""

    def __init__(self, policy: AccessPolicy, lookup: Lookup | None = None) -> None:
        self.policy = policy
        self.lookup = lookup  # None: the system resolver

    async def resolve(
        self, host: str, port: int = 0, family: int = socket.AF_UNSPEC
    ) -> list[dict[str, Any]]:
        allowed, refusals = [], []
        for fam, proto, address in await self._addresses(host, port, family):
            if reason := self.policy.refusal(host, address):
                refusals.append(reason)
                continue
            allowed.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": fam,
                    "proto": proto,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            )
        if not allowed:
            raise AddressRefused(refusals[0] if refusals else f"{host}: no address found")
        return allowed

    async def _addresses(self, host: str, port: int, family: int) -> list[tuple[int, int, str]]:
        if self.lookup is not None:
            found = await self.lookup(host, port)
            return [(_family_of(a), socket.IPPROTO_TCP, a) for a in found]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise OSError(exc.errno, f"cannot resolve {host}: {exc.strerror}") from None
        return [(fam, proto, str(sockaddr[0])) for fam, _, proto, _, sockaddr in infos]

    async def close(self) -> None:
        """Nothing to release (aiohttp's resolver interface asks for it)."""


def _family_of(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def legacy_ipv4(host: str) -> str | None:
    """The dotted address of a numeric IPv4 spelling the system resolver accepts (inet_aton,
    WHATWG): 1 to 4 parts, each decimal, octal (leading 0) or hex (0x); None for a name."""
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts.pop()  # a trailing dot
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        if re.fullmatch(r"0[xX][0-9a-fA-F]*", part):
            numbers.append(int(part[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]+", part):
            numbers.append(int(part, 8))
        elif re.fullmatch(r"[0-9]{1,40}", part):
            numbers.append(int(part))
        else:
            return None
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, n in enumerate(leading):
        value += n << (8 * (3 - index))
    return str(ipaddress.IPv4Address(value))


def address_literal(host: str) -> str | None:
    """`host` as a canonical address when it is an address literal in any spelling, else None."""
    try:
        ip: IPAddress = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return legacy_ipv4(host)
    return str(ip)


def parse_url(url: str | URL) -> URL:
    """The URL as aiohttp reads it, its host normalised (IDNA/UTS-46); http(s) only."""
    try:
        parsed = url if isinstance(url, URL) else URL(url)
        host = parsed.raw_host
    except (ValueError, UnicodeError, TypeError) as exc:
        raise ToolError(f"{str(url)!r} is not a valid web address: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ToolError(f"{str(url)!r}: only http and https addresses can be fetched")
    if not host:
        raise ToolError(f"{str(url)!r}: no host name in the address")
    if "%" in host and not host.startswith("["):
        # Browsers percent-decode a host (127.0.0.%31 is 127.0.0.1): read it as they do.
        try:
            decoded = URL.build(scheme="http", host=unquote(host)).raw_host
        except (ValueError, UnicodeError) as exc:
            raise ToolError(f"{str(url)!r}: the host {host!r} is not valid: {exc}") from None
        host = str(decoded)
        parsed = parsed.with_host(host)
    literal = address_literal(host)
    if literal is not None and literal != host.strip("[]"):
        parsed = parsed.with_host(literal)  # connect to exactly the address that is checked
    return parsed


def normalise_host(host: str) -> str:
    """`host` as aiohttp will send it: IDNA-encoded name or canonical address literal."""
    return str(parse_url(URL.build(scheme="http", host=host.strip("[]"))).raw_host)


def check_url(url: str | URL, policy: AccessPolicy) -> str:
    """The URL's normalised host, after refusing other schemes and private address literals."""
    host = str(parse_url(url).raw_host)
    if (literal := address_literal(host)) is None:
        return host  # a name: checked by GuardedResolver when it is resolved
    # aiohttp connects to an address literal without asking the resolver: check it here.
    if reason := policy.refusal(literal, literal):
        raise AddressRefused(reason)
    return literal


@dataclass(frozen=True)
class VettedURL:
    """A URL whose host passed the address fence (for the browser, which connects itself)."""

    url: str  # host normalised as the HTTP client sends it
    host: str  # that host; an IPv6 literal without brackets
    port: int
    addresses: tuple[str, ...]  # the checked addresses to connect to


async def vet_url(url: str, settings: WebSettings, *, lookup: Lookup | None = None) -> VettedURL:
    """Normalise `url`'s host, resolve it and keep only allowed addresses (raises
    AddressRefused when none is allowed, ToolError for a URL that cannot be fetched)."""
    policy = AccessPolicy.from_settings(settings.allow_private)
    parsed = parse_url(url)
    host = check_url(parsed, policy)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    if address_literal(host) is not None:
        addresses: tuple[str, ...] = (host,)
    else:
        try:
            found = await GuardedResolver(policy, lookup).resolve(host, port)
        except AddressRefused:
            raise
        except OSError as exc:
            raise ToolError(exc.strerror or f"cannot resolve {host}: {exc}") from None
        addresses = tuple(dict.fromkeys(str(entry["host"]) for entry in found))
    return VettedURL(str(parsed), host, port, addresses)


def same_site(a: str | URL, b: str | URL) -> bool:
    """Same normalised host (http → https on it counts as the same site)."""
    return parse_url(a).raw_host == parse_url(b).raw_host


@dataclass(frozen=True)
class Response:
    url: str  # after same-site redirects
    status: int
    content_type: str  # lower case, no parameters
    charset: str | None
    body: bytes
    filename: str | None = None  # from Content-Disposition, when the server names the file


@dataclass(frozen=True)
class CrossSiteRedirect:
    source: str
    target: str
    status: int


def make_session(settings: WebSettings, lookup: Lookup | None = None) -> aiohttp.ClientSession:
    import aiohttp

    policy = AccessPolicy.from_settings(settings.allow_private)
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(policy, lookup),  # type: ignore[arg-type]
        use_dns_cache=False,  # every connection resolves and checks again
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
        trust_env=False,  # a proxy would connect on our behalf, past the address check
    )


async def get(
    url: str, settings: WebSettings, max_bytes: int, *, lookup: Lookup | None = None
) -> Response | CrossSiteRedirect:
    """GET `url`, following same-site redirects; a redirect elsewhere is returned, not followed."""
    import aiohttp

    policy = AccessPolicy.from_settings(settings.allow_private)
    current = url
    try:
        async with (
            asyncio.timeout(settings.fetch_timeout),
            make_session(settings, lookup) as session,
        ):
            for _ in range(settings.max_redirects + 1):
                target_url = parse_url(current)  # the very URL object aiohttp will connect to
                check_url(target_url, policy)
                current = str(target_url)
                async with session.get(target_url, allow_redirects=False) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in REDIRECT_STATUSES and location:
                        target = _join(target_url, location)
                        if not same_site(current, target):
                            return CrossSiteRedirect(current, target, resp.status)
                        current = target
                        continue
                    if resp.status >= 400:
                        raise ToolError(
                            f"{current}: HTTP {resp.status} {resp.reason or ''}".strip()
                        )
                    body = await _read_capped(resp, max_bytes, current)
                    disposition = resp.content_disposition
                    return Response(
                        current,
                        resp.status,
                        resp.content_type.lower(),
                        resp.charset,
                        body,
                        disposition.filename if disposition else None,
                    )
    except TimeoutError:
        raise ToolError(f"{url}: no answer within {settings.fetch_timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise ToolError(f"{current}: {type(exc).__name__}: {exc}") from None
    raise ToolError(f"{url}: more than {settings.max_redirects} redirects")


def _join(base: URL, location: str) -> str:
    try:
        return str(base.join(URL(location)))
    except (ValueError, UnicodeError) as exc:
        raise ToolError(
            f"{base}: the redirect to {location!r} is not a valid address: {exc}"
        ) from None


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int, url: str) -> bytes:
    body = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > max_bytes:
            raise ToolError(f"{url}: more than {max_bytes // 2**20} MB; too large to read")
    return bytes(body)
