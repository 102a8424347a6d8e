"""The browser_exec worker's fences: its pages pass the address fence (loopback refused unless
`[web] allow_private` names it, in every spelling, subresources too), file:// and other schemes
are refused, it gets the allow-listed environment, and sandboxed its Python sees none of the home
and reaches no loopback listener. All pages are served on loopback; the home allows 127.0.0.1
where a test needs a page that loads, through the ordinary setting."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from atlas.home import Home
from atlas.tools.browser import browser_exec, close_browsers
from atlas.tools.registry import RunContext
from tests.helpers import BASE_CONFIG, make_home, run_context

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")

CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
ALLOW_LOCAL = '\n[web]\nallow_private = ["127.0.0.1"]\n'
SANDBOX_OFF = "\n[sandbox]\nenabled = false\n"
SECRET = "sk-daemon-secret-8086"


class Site:
    """A page on 127.0.0.1 that loads an image from 127.0.0.2 (loopback too, not allowed);
    records every path asked for, on either address."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def start(self) -> None:
        for host in ("127.0.0.1", "127.0.0.2"):
            app = web.Application()
            app.router.add_get("/{path:.*}", self.serve)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, host, 0)
            await site.start()
            self.ports[host] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.runners.append(runner)

    async def serve(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/ws":  # an echo websocket; recorded with the address it was on
            self.hits.append(f"/ws@{request.host.rsplit(':', 1)[0]}")
            socket = web.WebSocketResponse()
            await socket.prepare(request)
            async for message in socket:
                await socket.send_str(f"echo {message.data}")
            return socket
        self.hits.append(request.path)
        other = f"http://127.0.0.2:{self.ports['127.0.0.2']}"
        if request.path == "/redirect":
            raise web.HTTPFound(f"{other}/redirected")
        page = f'<title>Local page</title><img src="{other}/image.png"><p id=t>hello</p>'
        return web.Response(text=page, content_type="text/html")

    def url(self, path: str = "page") -> str:
        return f"http://127.0.0.1:{self.ports['127.0.0.1']}/{path}"

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    served = Site()
    await served.start()
    yield served
    await served.stop()


@pytest.fixture
async def open_run(home_path: Path) -> AsyncIterator[object]:
    homes: list[Home] = []

    def make(extra: str = "") -> RunContext:
        home = make_home(home_path, config=CONFIG + extra)
        homes.append(home)
        return run_context(home)

    yield make
    for home in homes:
        await close_browsers(home)


async def browse(run: RunContext, code: str) -> str:
    result = await browser_exec.invoke(run, {"code": code, "mode": "headless"})
    return result.text


def attempt(expression: str) -> str:
    """Code that prints the expression's value, or the first line of its error."""
    return (
        f"try:\n    print('ok', {expression})\n"
        "except Exception as exc:\n    print('refused', str(exc).splitlines()[0])\n"
    )


async def test_loopback_refused_in_every_spelling(open_run, site: Site) -> None:  # type: ignore[no-untyped-def]
    run = open_run()
    port = site.ports["127.0.0.1"]
    for url in (
        site.url(),
        f"http://127。0。0。1:{port}/a",  # ideographic full stops
        f"http://0x7f.1:{port}/b",  # a numeric spelling
        f"http://[::ffff:127.0.0.1]:{port}/c",
    ):
        output = await browse(run, attempt(f"goto_url({url!r})"))
        assert output.startswith("refused blocked by Atlas"), (url, output)
        assert "private, loopback or link-local" in output
    # A page that fetches from loopback is fenced too (a data: page has no address of its own).
    script = f"fetch('{site.url('from-script')}').then(() => document.title = 'reached')"
    output = await browse(
        run, f"new_tab('data:text/html,<script>{script}</script>')\nimport time; time.sleep(1)"
    )
    assert site.hits == [], output


async def test_file_and_other_schemes_refused(open_run) -> None:  # type: ignore[no-untyped-def]
    run = open_run(ALLOW_LOCAL)
    for url in ("file:///etc/passwd", "view-source:file:///etc/passwd", "chrome://version"):
        output = await browse(run, attempt(f"goto_url({url!r})"))
        assert output.startswith("refused blocked by Atlas") and "http and https only" in output
    # Around the helpers, the request itself is refused when Chromium makes it.
    output = await browse(
        run,
        "cdp('Page.navigate', {'url': 'file:///etc/passwd'})\nimport time; time.sleep(0.5)\n"
        "print(js('document.body ? document.body.innerText : \"\"'))",
    )
    assert "root:" not in output


async def test_allowed_page_loads_and_its_refused_subresource_does_not(  # type: ignore[no-untyped-def]
    open_run, site: Site
) -> None:
    run = open_run(ALLOW_LOCAL)
    output = await browse(
        run,
        f"goto_url({site.url()!r})\nimport time; time.sleep(0.5)\n"
        "print(page_info()['title'], js('document.querySelector(\"#t\").textContent'))",
    )
    assert output == "Local page hello", output
    assert site.hits == ["/page"]  # the image on 127.0.0.2 was never asked for


def websocket_exchange(url: str) -> str:
    """Code that opens a websocket, sends "hi" and prints the answer (or how it ended)."""
    script = (
        "new Promise(done => { const socket = new WebSocket(" + repr(url) + ");"
        " socket.onopen = () => socket.send('hi');"
        " socket.onmessage = event => { done(event.data); socket.close(); };"
        " socket.onclose = () => done('closed');"
        " setTimeout(() => done('no answer'), 4000); })"
    )
    return f"print(js({script!r}))\n"


@pytest.mark.parametrize("sandbox", ["", SANDBOX_OFF])
async def test_websockets_pass_the_fence(open_run, site: Site, sandbox: str) -> None:  # type: ignore[no-untyped-def]
    run = open_run(ALLOW_LOCAL + sandbox)
    allowed = f"ws://127.0.0.1:{site.ports['127.0.0.1']}/ws"
    refused = f"ws://127.0.0.2:{site.ports['127.0.0.2']}/ws"
    code = f"goto_url({site.url()!r})\n" + websocket_exchange(allowed) + websocket_exchange(refused)
    output = await browse(run, code)
    assert output.splitlines() == ["echo hi", "closed"], output
    assert "/ws@127.0.0.1" in site.hits and "/ws@127.0.0.2" not in site.hits


async def test_worker_gets_the_allow_listed_environment(  # type: ignore[no-untyped-def]
    open_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATLAS_TEST_DAEMON_SECRET", SECRET)
    for extra in ("", SANDBOX_OFF):
        run = open_run(extra)
        code = "import os\nprint(sorted(os.environ))\nprint(open('/proc/self/environ').read())"
        output = await browse(run, code)
        assert "BH_AGENT_WORKSPACE" in output
        assert SECRET not in output and "ATLAS_TEST_DAEMON_SECRET" not in output
        await close_browsers(run.home)


@needs_bwrap
async def test_sandboxed_worker_sees_no_home_and_no_loopback(open_run, site: Site) -> None:  # type: ignore[no-untyped-def]
    run = open_run(ALLOW_LOCAL)
    config = run.home.config_path
    output = await browse(
        run,
        attempt(f"open({str(config)!r}).read()")
        + attempt(f"open({str(config)!r}, 'a').write('x')")
        + "import socket\n"
        + attempt(f"socket.create_connection(('127.0.0.1', {site.ports['127.0.0.1']}), 3)")
        + attempt(f"open({str(run.bot.workspace / 'made.txt')!r}, 'w').write('ok')"),
    )
    # The append fails, or lands in the empty stand-in for the home: the real file is unchanged.
    read, _, connect, write = output.splitlines()
    assert read.startswith("refused") and connect.startswith("refused"), output
    assert write.startswith("ok"), output
    assert site.hits == [] and config.read_text() == CONFIG + ALLOW_LOCAL
    assert (run.bot.workspace / "made.txt").read_text() == "ok"
    # The page itself, through the egress proxy (which honours [web] allow_private), loads.
    assert await browse(run, f"goto_url({site.url()!r})['title']") == "'Local page'"
    # A redirect to a refused address: Playwright routes only a chain's first URL, but the
    # proxy checks every request.
    await browse(run, attempt(f"goto_url({site.url('redirect')!r})"))
    assert site.hits == ["/page", "/redirect"]


async def test_unsandboxed_worker_still_fences_pages(open_run, site: Site) -> None:  # type: ignore[no-untyped-def]
    run = open_run(SANDBOX_OFF)
    output = await browse(run, attempt(f"goto_url({site.url()!r})"))
    assert output.startswith("refused blocked by Atlas") and site.hits == []
    output = await browse(run, attempt("goto_url('file:///etc/passwd')"))
    assert output.startswith("refused blocked by Atlas")


async def test_no_sandbox_means_no_browser(open_run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from atlas.sandbox import launcher

    def unavailable(argv: object, policy: object) -> list[str]:
        raise launcher.SandboxUnavailable("bwrap is not installed; apt-get install bubblewrap")

    monkeypatch.setattr(launcher, "sandbox_argv", unavailable)
    result = await browser_exec.invoke(open_run(), {"code": "1 + 1", "mode": "headless"})
    assert result.is_error and "apt-get install bubblewrap" in result.text
