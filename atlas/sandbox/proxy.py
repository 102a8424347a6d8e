"""The egress proxy: the only way a sandboxed command reaches the outside.

Each command gets its own channel, a Unix socket that the sandbox's bridge forwards
127.0.0.1:3128 to. The channel speaks HTTP proxy (CONNECT host:port, and absolute-form http://
requests). A host gets through when it is on the allow-list or the person says yes (asked once per
host per channel); then the address fence of web_fetch applies (atlas/tools/web_access.py): the
name is resolved, private, loopback and link-local addresses are refused, and the connection goes
to exactly an address that was checked. Closing the channel ends every connection made through it.

Nothing of a request but its target host and port is logged: headers and bodies carry secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.config import DEFAULT_ALLOWED_DOMAINS
from atlas.sandbox.egress_watch import ChannelWatch
from atlas.sandbox.proxy_protocol import (
    ProxyRefusal,
    answer,
    is_ip,
    normalise_pattern,
    on_allow_list,
    read_request,
    splice,
)
from atlas.tools.web_access import AccessPolicy, AddressRefused, GuardedResolver

if TYPE_CHECKING:
    from atlas.config import WebSettings
    from atlas.home import Home

log = logging.getLogger("atlas.sandbox.proxy")

DomainAsker = Callable[[str], Awaitable[bool]]  # "may commands in this conversation reach <host>?"

SOCKET_PATH_MAX = 100  # sun_path holds 107 bytes; a longer runtime folder falls back to /tmp
MAX_CONNECTIONS = 128  # at once through one channel (npm opens a few dozen)
LINGER_SECONDS, LINGER_BYTES = 2.0, 1 << 20  # read and dropped after a refusal, at most


class EgressProxy:
    """One per home. `channel(ask)` gives each command its own socket and its own answers."""

    def __init__(self, allowed_domains: Sequence[str], web: WebSettings, runtime_dir: Path) -> None:
        self.runtime_dir = runtime_dir
        self._temporary_dir: Path | None = None
        self._channels: set[_Channel] = set()
        self.configure(allowed_domains, web)

    def configure(self, allowed_domains: Sequence[str], web: WebSettings) -> None:
        """Take the current settings; channels opened from now on use them."""
        self.allowed = tuple(normalise_pattern(p) for p in allowed_domains)
        self.policy = AccessPolicy.from_settings(web.allow_private)
        self.resolver = GuardedResolver(self.policy)
        self.connect_timeout = web.fetch_timeout

    async def start(self) -> None:
        """Make the private folder for the channels' sockets (idempotent)."""
        if self._temporary_dir is None and len(str(self.runtime_dir)) + 18 > SOCKET_PATH_MAX:
            self._temporary_dir = Path(tempfile.mkdtemp(prefix="atlas-proxy-"))
            self.runtime_dir = self._temporary_dir
        self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o700)

    async def stop(self) -> None:
        """Close every channel still open, and a temporary socket folder."""
        for channel in list(self._channels):
            await channel.close()
        if self._temporary_dir is not None:
            shutil.rmtree(self._temporary_dir, ignore_errors=True)
            self._temporary_dir = None

    @contextlib.asynccontextmanager
    async def channel(
        self, ask: DomainAsker | None, watch: ChannelWatch | None = None
    ) -> AsyncIterator[Path]:
        """A Unix socket (mode 0600) for one command; closed, with every connection through
        it, when the block ends."""
        await self.start()
        path = self.runtime_dir / f"{secrets.token_hex(6)}.sock"
        channel = _Channel(self, ask, path, watch)
        await channel.open()
        self._channels.add(channel)
        try:
            yield path
        finally:
            self._channels.discard(channel)
            await channel.close()


class _Channel:
    """One command's socket: its connections, and the person's answers about hosts."""

    def __init__(
        self, proxy: EgressProxy, ask: DomainAsker | None, path: Path, watch: ChannelWatch | None
    ) -> None:
        self.proxy, self.ask, self.path, self.watch = proxy, ask, path, watch
        self.allowed, self.policy, self.resolver = proxy.allowed, proxy.policy, proxy.resolver
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()
        self.answers: dict[str, asyncio.Task[bool]] = {}
        self.listed_seen: set[str] = set()  # listed hosts already logged on this channel
        self.closed = False

    async def open(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        os.chmod(self.path, 0o600)  # the folder is 0700 already; this is belt and braces

    async def close(self) -> None:
        self.closed = True  # a connection accepted but not yet served ends at once
        if self.server is not None:
            self.server.close()
        tasks = [*self.connections, *self.answers.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        upstream: asyncio.StreamWriter | None = None
        request = None
        try:
            if self.closed:
                return
            request = await read_request(reader)
            if request is None:
                return
            if len(self.connections) > MAX_CONNECTIONS:
                raise ProxyRefusal(503, f"more than {MAX_CONNECTIONS} connections at once")
            await self._decide(request.host, request.port)
            up_reader, upstream = await self._connect(request.host, request.port)
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.write(request.head + request.leftover)
            await splice((reader, writer), (up_reader, upstream))
        except ProxyRefusal as refusal:
            if self.watch is not None and request is not None:
                self.watch.refusals.append((request.host, request.port, refusal.reason))
            await _refuse(reader, writer, refusal)
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            pass  # the channel closed: ending here keeps asyncio's stream server from logging it
        except Exception:
            log.exception("egress: a connection failed unexpectedly")
        finally:
            self.connections.discard(task)
            for side in (upstream, writer):
                if side is not None:
                    side.close()

    async def _decide(self, host: str, port: int) -> None:
        """Raise a 403 unless `host` is listed or the person allows it (asked once)."""
        extra = tuple(normalise_pattern(p) for p in self.watch.also_allowed) if self.watch else ()
        if on_allow_list(host, self.allowed) or (extra and on_allow_list(host, extra)):
            if host not in self.listed_seen:
                self.listed_seen.add(host)
                log.info("egress %s:%d allowed (on the allow-list)", host, port)
            return
        if self.ask is None:
            log.info("egress %s:%d refused (not on the allow-list; no one to ask)", host, port)
            raise ProxyRefusal(403, _not_listed(host, "there is no one to ask in this context"))
        pending = self.answers.get(host)
        if pending is None:  # a shared task: parallel connections ask one question
            pending = self.answers[host] = asyncio.create_task(self._ask(host, self.ask))
        if not await asyncio.shield(pending):
            raise ProxyRefusal(403, _not_listed(host, "the person said no"))

    async def _ask(self, host: str, ask: DomainAsker) -> bool:
        try:
            allowed = bool(await ask(host))
        except Exception:
            log.exception("egress %s: asking the person failed; refused", host)
            return False
        log.info("egress %s: asked the person, %s", host, "allowed" if allowed else "refused")
        return allowed

    async def _connect(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve through the fence and connect to a checked address, never a name."""
        try:
            addresses = await self._addresses(host, port)
        except AddressRefused as exc:
            log.info("egress %s:%d refused by the address fence", host, port)
            raise ProxyRefusal(403, f"blocked by Atlas: {exc}") from None
        except OSError as exc:
            # GuardedResolver's message already names the host
            raise ProxyRefusal(502, exc.strerror or f"cannot resolve {host}: {exc}") from None
        failure = ""
        for address in addresses:
            try:
                async with asyncio.timeout(self.proxy.connect_timeout):
                    return await asyncio.open_connection(address, port)
            except TimeoutError:
                failure = f"no answer within {self.proxy.connect_timeout:g} s"
            except OSError as exc:
                failure = exc.strerror or str(exc)
        raise ProxyRefusal(502, f"cannot connect to {host} port {port}: {failure}")

    async def _addresses(self, host: str, port: int) -> list[str]:
        """The addresses the fence lets `host` be reached at (raises AddressRefused)."""
        if is_ip(host):  # a literal is checked as it is, like web_fetch's check_url
            if reason := self.policy.refusal(host, host):
                raise AddressRefused(reason)
            return [host]
        return [found["host"] for found in await self.resolver.resolve(host, port)]


async def _refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refusal: ProxyRefusal
) -> None:
    """Answer, then read what the client still sends for a moment before closing: closing
    with unread data makes the kernel reset the connection, and the answer could be lost."""
    with contextlib.suppress(ConnectionError, TimeoutError):
        writer.write(answer(refusal.status, refusal.reason))
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_SECONDS):
            discarded = 0
            while discarded < LINGER_BYTES and (data := await reader.read(1 << 16)):
                discarded += len(data)


def _not_listed(host: str, why: str) -> str:
    return f"blocked by Atlas: {host} is not on the sandbox's allowed domains and {why}"


_proxies: dict[Path, EgressProxy] = {}


async def proxy_for(home: Home) -> EgressProxy:
    """The home's proxy, made on first use and given the home's current settings each time."""
    allowed = _allowed_domains(home)
    proxy = _proxies.get(home.root)
    if proxy is None:
        proxy = _proxies[home.root] = EgressProxy(allowed, home.settings.web, home.root / "run")
    else:
        proxy.configure(allowed, home.settings.web)
    await proxy.start()
    return proxy


async def stop_proxies() -> None:
    """At shutdown: close every channel of every home's proxy."""
    while _proxies:
        _, proxy = _proxies.popitem()
        await proxy.stop()


def _allowed_domains(home: Home) -> Sequence[str]:
    sandbox = getattr(home.settings, "sandbox", None)  # [sandbox] in config.toml
    return tuple(sandbox.allowed_domains) if sandbox is not None else DEFAULT_ALLOWED_DOMAINS
