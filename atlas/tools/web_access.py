"""Reaching web pages safely: only http(s), never a private address unless allowed, redirects
followed only within the same site, and every hop checked again.

Host names are resolved by our own resolver (loop.getaddrinfo) inside aiohttp's connector, which
drops refused addresses and hands back only the checked ones: the connection goes to exactly the
address that was checked, so a DNS answer that changes between check and connect (rebinding)
cannot slip a private address through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from atlas.errors import ToolError

if TYPE_CHECKING:
    import aiohttp

    from atlas.config import WebSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
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
        if ip.is_global and not ip.is_multicast:
            return None
        if host.lower().rstrip(".") in self.hosts or any(ip in net for net in self.networks):
            return None
        where = f"{host} is" if host == address else f"{host} resolves to {ip},"
        return (
            f"{where} a private, loopback or link-local address; allow it in config.toml "
            "[web] allow_private if it is meant to be reached"
        )


class GuardedResolver:
    """An aiohttp resolver that returns only the addresses the policy allows."""

    def __init__(self, policy: AccessPolicy) -> None:
        self.policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: int = socket.AF_UNSPEC
    ) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise OSError(exc.errno, f"cannot resolve {host}: {exc.strerror}") from None
        allowed, refusals = [], []
        for fam, _, proto, _, sockaddr in infos:
            if reason := self.policy.refusal(host, sockaddr[0]):
                refusals.append(reason)
                continue
            allowed.append(
                {
                    "hostname": host,
                    "host": sockaddr[0],
                    "port": port,
                    "family": fam,
                    "proto": proto,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            )
        if not allowed:
            raise AddressRefused(refusals[0] if refusals else f"{host}: no address found")
        return allowed

    async def close(self) -> None:
        """Nothing to release (aiohttp's resolver interface asks for it)."""


def check_url(url: str, policy: AccessPolicy) -> str:
    """The URL's host, after refusing other schemes and private address literals."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"{url!r}: only http and https addresses can be fetched")
    host = parts.hostname
    if not host:
        raise ToolError(f"{url!r}: no host name in the address")
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host  # a name: checked by GuardedResolver when it is resolved
    # aiohttp connects to an address literal without asking the resolver: check it here.
    if reason := policy.refusal(host, host):
        raise AddressRefused(reason)
    return host


def same_site(a: str, b: str) -> bool:
    """Same host name (http → https on it counts as the same site)."""
    return (urlsplit(a).hostname or "").lower() == (urlsplit(b).hostname or "").lower()


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


def make_session(settings: WebSettings) -> aiohttp.ClientSession:
    import aiohttp

    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(AccessPolicy.from_settings(settings.allow_private)),  # type: ignore[arg-type]
        use_dns_cache=False,  # every connection resolves and checks again
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
        trust_env=False,  # a proxy would connect on our behalf, past the address check
    )


async def get(url: str, settings: WebSettings, max_bytes: int) -> Response | CrossSiteRedirect:
    """GET `url`, following same-site redirects; a redirect elsewhere is returned, not followed."""
    import aiohttp

    policy = AccessPolicy.from_settings(settings.allow_private)
    current = url
    try:
        async with asyncio.timeout(settings.fetch_timeout), make_session(settings) as session:
            for _ in range(settings.max_redirects + 1):
                check_url(current, policy)
                async with session.get(current, allow_redirects=False) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in REDIRECT_STATUSES and location:
                        target = urljoin(current, location)
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


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int, url: str) -> bytes:
    body = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > max_bytes:
            raise ToolError(f"{url}: more than {max_bytes // 2**20} MB; too large to read")
    return bytes(body)
