"""The egress proxy end to end, on loopback only.

A fake "outside" site on 127.0.0.1 stands in for an allowed domain; it is reachable only because
each test that means to reach it says so the way a person would, with config.toml's
[web] allow_private. Real clients (aiohttp, curl) reach the proxy's Unix socket through a small
TCP-to-Unix forwarder, as the sandbox's bridge does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from atlas.config import WebSettings
from atlas.home import Home
from atlas.sandbox.proxy import EgressProxy, proxy_for, stop_proxies

LOOPBACK_ALLOWED = WebSettings(allow_private=["127.0.0.1/32"])


class Origin:
    """The fake outside: answers with what it was asked, and keeps every request's headers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.headers))
        body = await request.read()
        text = f"{request.method} {request.path_qs} host={request.host} body={body.decode()}"
        return web.Response(text=text)


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    site = Origin()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", site.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    site.port = runner.addresses[0][1]
    yield site
    await runner.cleanup()


@contextlib.asynccontextmanager
async def tcp_bridge(socket_path: Path) -> AsyncIterator[int]:
    """127.0.0.1:<port> forwarded to the proxy's Unix socket (the sandbox's bridge, in small)."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(socket_path))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def exchange(socket_path: Path, request: str | bytes, timeout: float = 5) -> bytes:
    """Send one raw request to the proxy's socket and read until it closes."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(request.encode() if isinstance(request, str) else request)
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def connect(host: str, port: int, then: str = "") -> str:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n{then}"


class Asker:
    """The person: answers `answer` after `delay`, and counts the questions."""

    def __init__(self, answer: bool, delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.asked: list[str] = []

    async def __call__(self, host: str) -> bool:
        self.asked.append(host)
        await asyncio.sleep(self.delay)
        return self.answer


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[EgressProxy]:
    made = EgressProxy(["localhost", "pypi.org"], LOOPBACK_ALLOWED, tmp_path / "run")
    await made.start()
    yield made
    await made.stop()


async def test_listed_domain_passes_by_absolute_form_get(
    proxy: EgressProxy, origin: Origin
) -> None:
    async with (
        proxy.channel(None) as sock,
        tcp_bridge(sock) as port,
        aiohttp.ClientSession() as session,
        session.post(
            f"http://localhost:{origin.port}/simple/atlas/?x=1",
            data=b"payload",
            proxy=f"http://127.0.0.1:{port}",
            headers={"Proxy-Authorization": "Basic c2VjcmV0"},
        ) as resp,
    ):
        text = await resp.text()
    assert resp.status == 200
    assert text == f"POST /simple/atlas/?x=1 host=localhost:{origin.port} body=payload"
    assert "Proxy-Authorization" not in origin.requests[0]  # the proxy's own, never passed on


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_listed_domain_passes_through_a_connect_tunnel(
    proxy: EgressProxy, origin: Origin
) -> None:
    async with proxy.channel(None) as sock, tcp_bridge(sock) as port:
        curl = await asyncio.create_subprocess_exec(
            *("curl", "-sS", "--max-time", "10", "--noproxy", "", "--proxytunnel"),
            *("--proxy", f"http://127.0.0.1:{port}", f"http://localhost:{origin.port}/tunnel"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await curl.communicate()
    assert curl.returncode == 0, err.decode()
    assert out.decode() == f"GET /tunnel host=localhost:{origin.port} body="
    async with proxy.channel(None) as sock:  # the same tunnel, as seen on the socket itself
        then = "GET /raw HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        raw = await exchange(sock, connect("localhost", origin.port, then))
    assert raw.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
    assert raw.endswith(b"GET /raw host=localhost body=")


async def test_unlisted_domain_asks_once_and_no_is_kept(proxy: EgressProxy) -> None:
    person = Asker(False, delay=0.1)
    async with proxy.channel(person) as sock:
        answers = await asyncio.gather(
            exchange(sock, connect("example.com", 443)),
            exchange(sock, "GET http://Example.COM./x HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        )
        again = await exchange(sock, connect("example.com", 443))
    assert person.asked == ["example.com"]  # parallel connections wait for the one question
    for raw in [*answers, again]:
        assert raw.startswith(b"HTTP/1.1 403 Forbidden")
        assert raw.endswith(
            b"blocked by Atlas: example.com is not on the sandbox's allowed domains "
            b"and the person said no\n"
        )


async def test_unlisted_domain_yes_is_remembered_for_the_channel_only(
    tmp_path: Path, origin: Origin
) -> None:
    proxy = EgressProxy(["pypi.org"], LOOPBACK_ALLOWED, tmp_path / "run")
    person = Asker(True)
    request = f"GET http://localhost:{origin.port}/yes HTTP/1.1\r\nHost: localhost\r\n\r\n"
    async with proxy.channel(person) as sock:
        first = await exchange(sock, request)
        second = await exchange(sock, request)
    assert person.asked == ["localhost"]
    assert first.endswith(b"GET /yes host=localhost:%d body=" % origin.port)
    assert second.endswith(b"GET /yes host=localhost:%d body=" % origin.port)
    async with proxy.channel(person) as sock:  # the next command asks again
        await exchange(sock, request)
    assert person.asked == ["localhost", "localhost"]
    async with proxy.channel(None) as sock:  # and where no one can be asked, no
        refused = await exchange(sock, request)
    assert refused.startswith(b"HTTP/1.1 403")
    assert b"there is no one to ask" in refused
    await proxy.stop()


@pytest.mark.parametrize(
    ("listed", "target", "reason"),
    [
        ("localhost", "localhost", b"localhost resolves to 127.0.0.1"),
        ("127.0.0.1", "127.0.0.1", b"127.0.0.1 is a private, loopback"),
        ("127.0.0.1", "2130706433", b"127.0.0.1 is a private, loopback"),
        ("::1", "[::1]", b"::1 is a private, loopback"),
        ("::ffff:127.0.0.1", "[::ffff:127.0.0.1]", b"private, loopback"),
        ("169.254.169.254", "169.254.169.254", b"private, loopback or link-local"),  # metadata
        ("10.1.2.3", "10.1.2.3", b"private, loopback"),
        ("192.168.1.1", "192.168.1.1", b"private, loopback"),
    ],
)
async def test_the_address_fence_holds_even_for_listed_names(
    tmp_path: Path, origin: Origin, listed: str, target: str, reason: bytes
) -> None:
    proxy = EgressProxy([listed], WebSettings(), tmp_path / "run")  # no [web] allow_private
    async with proxy.channel(Asker(True)) as sock:
        raw = await exchange(sock, connect(target, origin.port))
        plain = f"GET http://{target}:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n"
        raw_plain = await exchange(sock, plain)
    for answer in (raw, raw_plain):
        assert answer.startswith(b"HTTP/1.1 403 Forbidden")
        assert b"blocked by Atlas: " in answer and reason in answer
    assert origin.requests == []
    await proxy.stop()


@pytest.mark.parametrize(
    "target",
    ["127%E3%80%820%E3%80%820%E3%80%821", "%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1", "0x7f.1"],
)
async def test_unicode_and_numeric_spellings_of_an_address_are_the_address(
    tmp_path: Path, origin: Origin, target: str
) -> None:
    proxy = EgressProxy(["localhost"], WebSettings(), tmp_path / "run")
    person = Asker(True)
    async with proxy.channel(person) as sock:
        raw = await exchange(sock, connect(target, origin.port))
    assert person.asked == ["127.0.0.1"]  # asked about the address, in its plain spelling
    assert raw.startswith(b"HTTP/1.1 403 Forbidden")  # and then the fence refused it
    assert b"127.0.0.1 is a private, loopback" in raw
    async with proxy.channel(None) as sock:
        raw = await exchange(sock, "CONNECT 127。0。0。1:80 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert raw.startswith(b"HTTP/1.1 400 Bad Request")
    assert origin.requests == []
    await proxy.stop()


async def test_closing_the_channel_ends_its_open_tunnels(proxy: EgressProxy) -> None:
    held: list[asyncio.StreamReader] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(reader)  # the test reads it; this side never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with proxy.channel(None) as sock:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(connect("localhost", port).encode())
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"still here")
        assert await asyncio.wait_for(held[0].readexactly(10), 5) == b"still here"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the command's side is closed
    assert await asyncio.wait_for(held[0].read(), 5) == b""  # and so is the outside's
    assert not sock.exists()
    writer.close()
    server.close()


async def test_socket_is_private_and_a_long_home_falls_back_to_a_short_folder(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 90) / "run"
    proxy = EgressProxy([], WebSettings(), deep)
    async with proxy.channel(None) as sock:
        assert len(str(sock)) <= 107
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    await proxy.stop()
    assert not sock.parent.exists()  # the temporary folder goes with the proxy
    short = EgressProxy([], WebSettings(), tmp_path / "run")
    async with short.channel(None) as sock:
        assert sock.parent == tmp_path / "run"
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    await short.stop()


async def test_a_huge_request_head_is_refused(proxy: EgressProxy) -> None:
    async with proxy.channel(None) as sock:
        head = b"GET http://localhost/ HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 200_000 + b"\r\n\r\n"
        raw = await exchange(sock, head)
    assert raw.startswith(b"HTTP/1.1 431 ")


async def test_a_closed_port_is_a_bad_gateway(proxy: EgressProxy) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with proxy.channel(None) as sock:
        raw = await exchange(sock, connect("localhost", port))
    assert raw.startswith(b"HTTP/1.1 502 Bad Gateway")
    assert b"cannot connect to localhost port" in raw


async def test_one_proxy_per_home_until_shutdown(home: Home) -> None:
    first = await proxy_for(home)
    assert await proxy_for(home) is first
    async with first.channel(None) as sock:
        assert sock.exists()
        await stop_proxies()  # shutdown closes channels still open
        assert not sock.exists()
    assert await proxy_for(home) is not first
    await stop_proxies()


async def test_a_failing_question_is_a_no(tmp_path: Path) -> None:
    async def broken(host: str) -> bool:
        raise RuntimeError("the channel to the person is down")

    proxy = EgressProxy([], WebSettings(), tmp_path / "run")
    async with proxy.channel(broken) as sock:
        raw = await exchange(sock, connect("example.com", 443))
    assert raw.startswith(b"HTTP/1.1 403 Forbidden")
    assert b"example.com is not on the sandbox's allowed domains" in raw
    await proxy.stop()


async def test_connections_at_once_are_bounded(
    proxy: EgressProxy, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("atlas.sandbox.proxy.MAX_CONNECTIONS", 1)
    async with proxy.channel(None) as sock:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(connect("localhost", origin.port).encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        second = await exchange(sock, connect("localhost", origin.port))
        writer.close()
    assert second.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert b"more than 1 connections at once" in second


async def test_the_home_proxy_uses_the_default_allow_list(home: Home) -> None:
    proxy = await proxy_for(home)
    async with proxy.channel(None) as sock:
        raw = await exchange(sock, connect("localhost", 80))
    assert b"localhost is not on the sandbox's allowed domains" in raw
    assert proxy.runtime_dir.stat().st_mode & 0o077 == 0
    await stop_proxies()


async def test_a_refused_upload_still_gets_its_answer(tmp_path: Path) -> None:
    proxy = EgressProxy([], WebSettings(), tmp_path / "run")
    body = b"x" * 500_000  # more than the proxy reads with the head: closing early would reset
    head = (
        f"POST http://example.com/up HTTP/1.1\r\nHost: example.com\r\nContent-Length: {len(body)}"
    )
    async with proxy.channel(None) as sock:
        raw = await exchange(sock, head.encode() + b"\r\n\r\n" + body)
    assert raw.startswith(b"HTTP/1.1 403 Forbidden")
    await proxy.stop()


async def test_a_name_that_does_not_resolve_is_a_bad_gateway(tmp_path: Path) -> None:
    proxy = EgressProxy(["unknown.example"], WebSettings(), tmp_path / "run")
    async with proxy.channel(None) as sock:  # the tests' resolver answers only for loopback
        raw = await exchange(sock, connect("unknown.example", 443))
    assert raw.startswith(b"HTTP/1.1 502 Bad Gateway")
    assert b"\r\n\r\ncannot resolve unknown.example: " in raw
    await proxy.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
async def test_git_clones_through_the_proxy(
    proxy: EgressProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ordinary work: git over (dumb) HTTP, the proxy in between as inside the sandbox."""
    caplog.set_level(logging.INFO, "atlas.sandbox.proxy")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    work, bare = tmp_path / "work", tmp_path / "served" / "repo.git"
    script = (
        f"git init -q {work} && cd {work} && echo hello > README && git add README && "
        "git -c user.name=t -c user.email=t@t commit -qm first && "
        f"git clone -q --bare {work} {bare} && cd {bare} && git update-server-info"
    )
    made = await asyncio.create_subprocess_shell(script, env=env)
    assert await made.wait() == 0
    app = web.Application()
    app.router.add_static("/", tmp_path / "served")
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    async with proxy.channel(None) as sock, tcp_bridge(sock) as proxy_port:
        clone = await asyncio.create_subprocess_exec(
            *("git", "-c", f"http.proxy=http://127.0.0.1:{proxy_port}", "clone", "-q"),
            *(f"http://localhost:{port}/repo.git", str(tmp_path / "clone")),
            env={**env, "NO_PROXY": "", "no_proxy": ""},
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await clone.communicate()
    await runner.cleanup()
    assert clone.returncode == 0, err.decode()
    assert (tmp_path / "clone" / "README").read_text() == "hello\n"
    assert f"egress localhost:{port} allowed (on the allow-list)" in caplog.text  # it went through
