"""web_search and web_fetch against fake engines and a fake site served by aiohttp on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from atlas.errors import ToolError
from atlas.home import Home
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.web import clear_cache, fit_to_budget, web_fetch, web_search
from tests.helpers import BASE_CONFIG, make_home, run_context
from tests.unit.test_file_tools import docx_bytes, pdf_bytes

ARTICLE = """<!doctype html><html><head><title>Release notes 2.0 | Example Project</title>
<meta property="article:published_time" content="2024-03-05T10:00:00Z"></head><body>
<header><nav><ul><li><a href="/">Home</a></li><li><a href="/blog">Blog archive</a></li>
<li><a href="/about">About us</a></li></ul></nav></header>
<main><article><h1>Release notes 2.0</h1>
<p>Version 2.0 brings a faster parser and a new plugin system. Read the
<a href="https://example.org/guide">upgrade guide</a> before you update, because several defaults
changed in ways that matter to everyone who runs it in production.</p>
<h2>New features</h2>
<ul><li>A streaming parser that is twice as fast</li><li>Plugins loaded from entry points</li>
<li>Typed configuration with clear errors</li></ul>
<p>The parser rewrite took most of the year. It now handles documents of any size in constant
memory, and the error messages name the line and column of every fault they find.</p>
<h2>Benchmarks</h2>
<table><tr><th>Version</th><th>Seconds</th></tr><tr><td>1.9</td><td>4.2</td></tr>
<tr><td>2.0</td><td>2.1</td></tr></table>
<p>All numbers were measured on the same machine with the same corpus of ten thousand files.</p>
</article></main>
<footer><p>Copyright 2024 Example Corp. All rights reserved.</p>
<a href="/privacy">Privacy policy</a> <a href="/cookies">Cookie settings</a></footer>
</body></html>"""


def long_page() -> str:
    paragraphs = "\n".join(
        f"<p>Paragraph {n:03d} says something worth reading about topic {n}, at some length so "
        f"that the page grows well past the budget of the test.</p>"
        for n in range(400)
    )
    return f"<html><head><title>Long read</title></head><body><article><h1>Long read</h1>{paragraphs}</article></body></html>"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def reply(**response: Any) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(**response)

    return handler


def redirect(kind: type[web.HTTPException], target: str | Callable[[], str]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise kind(target if isinstance(target, str) else target())  # type: ignore[call-arg]

    return handler


class Site:
    """The fake web site: pages, a PDF, a Word file, redirects, a counter for the cache."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.middlewares.append(self._count)
        html, pdf, binary = "text/html", "application/pdf", "application/octet-stream"
        docx = docx_bytes("Quarterly plan", "Ship it")
        named = {"Content-Disposition": 'attachment; filename="memo.docx"'}
        routes = {
            "/article": reply(text=ARTICLE, content_type=html),
            "/long": reply(text=long_page(), content_type=html),
            "/paper.pdf": reply(body=pdf_bytes("Hello zebra"), content_type=pdf),
            "/files/plan.docx": reply(body=docx, content_type=binary),  # named by its address
            "/download": reply(body=docx, content_type=binary, headers=named),
            "/hop": redirect(web.HTTPFound, "/hop2"),
            "/hop2": redirect(web.HTTPMovedPermanently, "/article"),
            "/loop": redirect(web.HTTPFound, "/loop"),
            "/away": redirect(web.HTTPFound, "https://example.org/elsewhere"),
            "/sideways": redirect(web.HTTPFound, lambda: f"http://localhost:{self.port}/"),
            "/notes.txt": reply(text="plain notes\nline two"),
            "/gone": reply(status=404, text="no such page"),
            "/pixel.png": reply(body=b"\x89PNG...", content_type="image/png"),
            "/to-loopback": redirect(
                web.HTTPFound, lambda: f"http://127。0。0。1:{self.port}/article"
            ),
            "/to-mapped": redirect(
                web.HTTPFound, lambda: f"http://[::ffff:127.0.0.1]:{self.port}/article"
            ),
            "/to-number": redirect(web.HTTPFound, lambda: f"http://2130706433:{self.port}/article"),
            "/counter": self._counter,
            "/slow": self._slow,
        }
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        return await handler(request)

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(1)  # past the test's fetch_timeout; short, as cleanup waits for it
        return web.Response(text="too late")

    async def _counter(self, request: web.Request) -> web.Response:
        n = self.hits[request.path]
        body = f"<html><head><title>Counter</title></head><body><article><h1>Visit {n}</h1><p>This page has been visited {n} times by the fetcher so far today.</p></article></body></html>"
        return web.Response(text=body, content_type="text/html")


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    clear_cache()
    fake = Site()
    runner, fake.port = await serve(fake.app())
    yield fake
    await runner.cleanup()
    clear_cache()


def home_with(root: Path, web_settings: str) -> Home:
    return make_home(
        root, config=BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + web_settings
    )


@pytest.fixture
def run(home_path: Path) -> RunContext:
    return run_context(home_with(home_path, '\n[web]\nallow_private = ["127.0.0.1"]\n'))


async def fetch(run: RunContext, url: str, **kwargs: Any) -> ToolResult:
    return await web_fetch.invoke(run, {"url": url, **kwargs})


# ---- web_fetch ----------------------------------------------------------------------------------


async def test_article_keeps_content_and_drops_boilerplate(run: RunContext, site: Site) -> None:
    result = await fetch(run, f"http://127.0.0.1:{site.port}/article")
    assert not result.is_error, result.text
    text = result.text
    assert text.startswith("# Release notes 2.0")
    assert "Date: 2024-03-05" in text
    assert f"Address: http://127.0.0.1:{site.port}/article" in text
    assert "## New features" in text
    assert "- A streaming parser that is twice as fast" in text
    assert "[upgrade guide](https://example.org/guide)" in text
    assert "| 2.0 | 2.1 |" in text
    for boilerplate in ("Blog archive", "About us", "Copyright 2024", "Cookie settings"):
        assert boilerplate not in text


async def test_pdf_and_office_documents_come_as_markdown(run: RunContext, site: Site) -> None:
    pdf = await fetch(run, f"http://127.0.0.1:{site.port}/paper.pdf")
    assert not pdf.is_error, pdf.text
    assert "Hello zebra" in pdf.text and "Document: .pdf" in pdf.text
    # Generic downloads, named by their address or by Content-Disposition.
    for path in ("/files/plan.docx", "/download"):
        memo = await fetch(run, f"http://127.0.0.1:{site.port}{path}")
        assert not memo.is_error, memo.text
        assert "Quarterly plan" in memo.text and "Ship it" in memo.text


async def test_plain_text_and_unreadable_types(run: RunContext, site: Site) -> None:
    notes = await fetch(run, f"http://127.0.0.1:{site.port}/notes.txt")
    assert "plain notes\nline two" in notes.text
    image = await fetch(run, f"http://127.0.0.1:{site.port}/pixel.png")
    assert image.is_error and "image/png" in image.text
    gone = await fetch(run, f"http://127.0.0.1:{site.port}/gone")
    assert gone.is_error and "HTTP 404" in gone.text


async def test_long_page_is_cut_and_spilled_whole(run: RunContext, site: Site) -> None:
    result = await fetch(run, f"http://127.0.0.1:{site.port}/long", char_limit=4000)
    text = result.text
    assert "Paragraph 000" in text and "Paragraph 399" in text
    assert "Paragraph 200" not in text
    assert len(text) < 4000 + 400  # the budget plus the note
    head, _, rest = text.partition("[... ")
    assert 2500 < len(head) <= 3001  # three quarters of the budget, cut at a line
    spill_note = rest.split("...]", 1)[0]
    path = Path(spill_note.split("read_file path='", 1)[1].split("'", 1)[0])
    offset = int(spill_note.rsplit("offset=", 1)[1].strip())
    whole = path.read_text(encoding="utf-8")
    assert path.is_relative_to(run.home.spill_dir)
    assert "Paragraph 200" in whole and whole.startswith("# Long read")
    # The offset names the first line left out: the line after the head's last line.
    lines = whole.splitlines()
    assert lines[offset - 2] in head and lines[offset - 1] not in head


def test_fit_to_budget_leaves_short_text_alone(tmp_path: Path) -> None:
    assert fit_to_budget("short\n", 2000, tmp_path / "x.md") == "short\n"
    assert not (tmp_path / "x.md").exists()


async def test_pages_are_cached_per_home(run: RunContext, site: Site, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{site.port}/counter"
    first = await fetch(run, url)
    second = await fetch(run, url)
    assert "Visit 1" in first.text and "Visit 1" in second.text
    assert "cached copy" in second.text and "cached copy" not in first.text
    assert site.hits["/counter"] == 1
    other_home = run_context(
        home_with(tmp_path / "other", '\n[web]\nallow_private = ["127.0.0.1"]\n')
    )
    assert "Visit 2" in (await fetch(other_home, url)).text


async def test_cache_can_be_turned_off(home_path: Path, site: Site) -> None:
    run = run_context(
        home_with(home_path, '\n[web]\ncache_minutes = 0\nallow_private = ["127.0.0.1"]\n')
    )
    url = f"http://127.0.0.1:{site.port}/counter"
    await fetch(run, url)
    assert "Visit 2" in (await fetch(run, url)).text


async def test_same_site_redirects_are_followed(run: RunContext, site: Site) -> None:
    result = await fetch(run, f"http://127.0.0.1:{site.port}/hop")
    assert result.text.startswith("# Release notes 2.0")
    assert f"Address: http://127.0.0.1:{site.port}/article" in result.text
    looping = await fetch(run, f"http://127.0.0.1:{site.port}/loop")
    assert looping.is_error and "more than 5 redirects" in looping.text


async def test_cross_site_redirect_is_returned_not_followed(run: RunContext, site: Site) -> None:
    result = await fetch(run, f"http://127.0.0.1:{site.port}/away")
    assert not result.is_error
    assert "https://example.org/elsewhere" in result.text and "Not followed" in result.text
    # Another host name for the same machine is another site too.
    sideways = await fetch(run, f"http://127.0.0.1:{site.port}/sideways")
    assert f"http://localhost:{site.port}/" in sideways.text and "Not followed" in sideways.text
    assert "/" not in site.hits


async def test_private_addresses_are_refused_without_the_allow_list(home: Home, site: Site) -> None:
    run = run_context(home)
    for url in (
        f"http://127.0.0.1:{site.port}/article",  # an address literal
        f"http://localhost:{site.port}/article",  # a name, refused after resolving it
        f"http://[::ffff:127.0.0.1]:{site.port}/article",  # the IPv4 address inside IPv6
    ):
        result = await fetch(run, url)
        assert result.is_error, url
        assert "allow_private" in result.text and "loopback" in result.text, result.text
    assert "/article" not in site.hits


async def test_allow_list_takes_host_names(home_path: Path, site: Site) -> None:
    run = run_context(home_with(home_path, '\n[web]\nallow_private = ["localhost"]\n'))
    result = await fetch(run, f"http://localhost:{site.port}/article")
    assert not result.is_error, result.text
    assert "Release notes 2.0" in result.text
    refused = await fetch(run, f"http://127.0.0.1:{site.port}/article")
    assert refused.is_error and "allow_private" in refused.text


async def test_a_slow_site_times_out(home_path: Path, site: Site) -> None:
    settings = '\n[web]\nfetch_timeout = 0.3\nallow_private = ["127.0.0.1"]\n'
    result = await fetch(
        run_context(home_with(home_path, settings)), f"http://127.0.0.1:{site.port}/slow"
    )
    assert result.is_error and "no answer within 0.3 s" in result.text


async def test_only_http_and_https(run: RunContext) -> None:
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", "javascript:alert(1)", "http:///x"):
        result = await fetch(run, url)
        assert result.is_error, url


async def test_char_limit_bounds(run: RunContext) -> None:
    result = await fetch(run, "http://127.0.0.1:1/", char_limit=1000)
    assert result.is_error and "char_limit" in result.text


def test_web_tools_are_untrusted_and_read_only() -> None:
    assert web_search.untrusted and web_fetch.untrusted
    assert web_search.read_only and web_fetch.read_only
    assert web_fetch.failure_tolerant and web_fetch.pages_itself


# ---- web_search ---------------------------------------------------------------------------------


class Engines:
    """Fake Tavily and Brave: each records what it was asked and can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failing: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/tavily", self._tavily)
        app.router.add_get("/brave", self._brave)
        return app

    async def _tavily(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("tavily", {"auth": request.headers.get("Authorization"), **body}))
        if "tavily" in self.failing:
            return web.Response(status=500, text="boom")
        results = [
            {"title": "Tavily hit", "url": "https://a.example/1", "content": "from tavily"},
            {"title": "Second", "url": "https://a.example/2", "content": "more"},
        ]
        return web.json_response({"results": results[: body["max_results"]]})

    async def _brave(self, request: web.Request) -> web.Response:
        self.calls.append(
            ("brave", {"token": request.headers.get("X-Subscription-Token"), **request.query})
        )
        if "brave" in self.failing:
            return web.Response(text="not json at all", content_type="text/html")
        hit = {
            "title": "Brave &amp; hit",
            "url": "https://b.example/",
            "description": "<strong>bold</strong> text",
        }
        return web.json_response({"web": {"results": [hit]}})


@pytest.fixture
async def engines(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Engines, int]]:
    fake = Engines()
    runner, port = await serve(fake.app())
    # ddgs has its own (Rust) HTTP client that the socket guard cannot see: send it to a closed port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("DDGS_PROXY", f"http://127.0.0.1:{closed}")
    yield fake, port
    await runner.cleanup()


def search_run(root: Path, port: int) -> RunContext:
    return run_context(
        home_with(
            root,
            f'\n[web]\ntavily_url = "http://127.0.0.1:{port}/tavily"\n'
            f'brave_url = "http://127.0.0.1:{port}/brave"\nsearch_timeout = 5.0\n',
        )
    )


async def search(run: RunContext, query: str, limit: int = 5) -> ToolResult:
    return await web_search.invoke(run, {"query": query, "limit": limit})


async def test_tavily_answers_first_when_its_key_is_set(
    home_path: Path, engines: tuple[Engines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, port = engines
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "br-key")
    result = await search(search_run(home_path, port), "release notes", limit=1)
    assert not result.is_error, result.text
    assert result.text.splitlines() == [
        "Tavily results for 'release notes':",
        "1. Tavily hit",
        "   https://a.example/1",
        "   from tavily",
    ]
    assert fake.calls == [
        ("tavily", {"auth": "Bearer tv-key", "query": "release notes", "max_results": 1})
    ]


async def test_a_failing_engine_falls_through_to_the_next(
    home_path: Path, engines: tuple[Engines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, port = engines
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "br-key")
    fake.failing.add("tavily")
    result = await search(search_run(home_path, port), "q")
    assert not result.is_error, result.text
    assert result.text.startswith("Brave results for 'q': (after Tavily failed: HTTP 500")
    assert "1. Brave & hit\n   https://b.example/\n   bold text" in result.text
    assert [name for name, _ in fake.calls] == ["tavily", "brave"]
    assert fake.calls[1][1] == {"token": "br-key", "q": "q", "count": "5"}


async def test_engines_without_keys_are_skipped(
    home_path: Path, engines: tuple[Engines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, port = engines
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "br-key")
    result = await search(search_run(home_path, port), "q")
    assert result.text.startswith("Brave results")
    assert [name for name, _ in fake.calls] == ["brave"]


async def test_key_variable_names_come_from_config(
    home_path: Path, engines: tuple[Engines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, port = engines
    monkeypatch.setenv("MY_TAVILY", "mine")
    monkeypatch.setenv("TAVILY_API_KEY", "not-this-one")
    run = run_context(
        home_with(
            home_path,
            f'\n[web]\ntavily_url = "http://127.0.0.1:{port}/tavily"\ntavily_api_key_env = "MY_TAVILY"\n',
        )
    )
    result = await search(run, "q")
    assert result.text.startswith("Tavily results")
    assert fake.calls[0][1]["auth"] == "Bearer mine"


async def test_without_keys_ddgs_is_tried_and_total_failure_is_clear(
    home_path: Path, engines: tuple[Engines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, port = engines
    result = await search(search_run(home_path, port), "q")
    assert result.is_error
    assert result.text.startswith("Error: web search failed with every engine: DuckDuckGo (ddgs)")
    assert fake.calls == []
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "br-key")
    fake.failing.update({"tavily", "brave"})
    everything = await search(search_run(home_path, port), "q")
    assert everything.is_error
    reasons = everything.text.split(": ", 2)[2]
    assert [part.split(" failed")[0] for part in reasons.split("; ")] == [
        "Tavily",
        "Brave",
        "DuckDuckGo (ddgs)",
    ]


async def test_search_arguments_are_checked(home: Home) -> None:
    run = run_context(home)
    assert (await search(run, "q", limit=11)).is_error
    assert (await search(run, "   ")).is_error


# ---- the address fence sees every spelling of an address (issue 18, item 6) ----------------------

LOOPBACK_SPELLINGS = (
    "127。0。0。1",  # ideographic full stops
    "１２７.０.０.１",  # full-width digits
    "①②⑦.0.0.1",  # circled digits
    "127．0．0．1",  # full-width full stop U+FF0E
    "127｡0｡0｡1",  # half-width ideographic full stop U+FF61
    "2130706433",  # one decimal number
    "0x7f.1",  # hex, two parts
    "0x7f000001",  # hex, one part
    "0177.0.0.1",  # octal
    "127.1",  # short form
    "127.0.0.1.",  # trailing dot
    "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
    "[::ffff:7f00:1]",
    "[::1]",
    "ⓛⓞⓒⓐⓛⓗⓞⓢⓣ",  # circled letters: a name that maps to localhost
    "LOCALHOST",
    "127.0.0.%31",  # percent-encoded, as browsers decode it
    "[::127.0.0.1]",  # IPv4-compatible IPv6
    "[64:ff9b::7f00:1]",  # NAT64
    "[2002:7f00:1::]",  # 6to4
    "[::ffff:0:7f00:1]",  # SIIT
)


async def test_every_spelling_of_loopback_is_refused(home: Home, site: Site) -> None:
    run = run_context(home)
    for host in LOOPBACK_SPELLINGS:
        result = await fetch(run, f"http://{host}:{site.port}/article")
        assert result.is_error, host
        assert "allow_private" in result.text, (host, result.text)
    assert "/article" not in site.hits


def test_hosts_are_normalised_as_the_http_client_does() -> None:
    from atlas.tools.web_access import normalise_host

    for host in LOOPBACK_SPELLINGS[:11]:
        assert normalise_host(host) == "127.0.0.1", host
    assert normalise_host("[::ffff:127.0.0.1]") == "::ffff:7f00:1"
    assert normalise_host("bücher.de") == "xn--bcher-kva.de"
    assert normalise_host("Example.COM") == "example.com"
    assert normalise_host("1.2.3.4.5") == "1.2.3.4.5"  # five parts: a name, left to DNS
    assert normalise_host("127.0.0.%31") == "127.0.0.1"
    assert normalise_host("ex%61mple.com") == "example.com"


def test_public_addresses_and_their_ipv6_wrappings_pass() -> None:
    from atlas.tools.web_access import AccessPolicy, check_url

    policy = AccessPolicy.from_settings([])
    for url, host in (
        ("http://８.８.８.８/", "8.8.8.8"),
        ("http://[2002:808:808::1]/", "2002:808:808::1"),  # 6to4 of a public address
        ("http://[2606:4700::1111]/", "2606:4700::1111"),
        ("http://Example.com./x", "example.com."),
    ):
        assert check_url(url, policy) == host, url


async def test_vet_url_checks_literals_and_resolved_names() -> None:
    from atlas.config import WebSettings
    from atlas.errors import ToolError
    from atlas.tools.web_access import AddressRefused, vet_url

    async def lookup(host: str, port: int) -> list[str]:
        return {"public.test": ["93.184.216.34"], "rebind.test": ["10.0.0.5", "127.0.0.1"]}[host]

    settings = WebSettings()
    vetted = await vet_url("https://Public.TEST/a?b=1", settings, lookup=lookup)
    assert (vetted.host, vetted.port, vetted.addresses) == ("public.test", 443, ("93.184.216.34",))
    assert vetted.url == "https://public.test/a?b=1"
    with pytest.raises(AddressRefused):
        await vet_url("http://rebind.test/", settings, lookup=lookup)
    with pytest.raises(AddressRefused):
        await vet_url("http://0x7f.1:8080/", settings, lookup=lookup)
    with pytest.raises(AddressRefused):
        await vet_url("http://[::ffff:169.254.169.254]/", settings, lookup=lookup)
    with pytest.raises(ToolError):
        await vet_url("file:///etc/passwd", settings, lookup=lookup)
    literal = await vet_url("http://８.８.８.８/", settings, lookup=lookup)
    assert literal.addresses == ("8.8.8.8",) and literal.url == "http://8.8.8.8/"


async def test_a_name_connects_to_the_address_its_resolver_checked(site: Site) -> None:
    """The connection goes to what the (fake) resolver answered and the fence let through."""
    from atlas.config import WebSettings
    from atlas.tools.web_access import Response, get

    asked: list[str] = []

    async def lookup(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    allowed = WebSettings(allow_private=["pages.test"])
    page = await get(f"http://pages.test:{site.port}/article", allowed, 1 << 20, lookup=lookup)
    assert isinstance(page, Response) and b"Release notes 2.0" in page.body
    assert asked == ["pages.test"]
    refused = WebSettings(allow_private=["other.test"])
    with pytest.raises(ToolError, match="allow_private"):
        await get(f"http://pages.test:{site.port}/article", refused, 1 << 20, lookup=lookup)


async def test_a_redirect_to_a_private_address_is_not_followed(site: Site) -> None:
    """From an allowed name, a redirect to loopback (in any spelling) is another site: it is
    returned, not followed, and the fence refuses it when it is fetched."""
    from atlas.config import WebSettings
    from atlas.tools.web_access import CrossSiteRedirect, get, vet_url

    async def lookup(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    settings = WebSettings(allow_private=["pages.test"])
    for path in ("/to-loopback", "/to-mapped", "/to-number"):
        answer = await get(f"http://pages.test:{site.port}{path}", settings, 1 << 20, lookup=lookup)
        assert isinstance(answer, CrossSiteRedirect), path
        with pytest.raises(ToolError, match="allow_private"):
            await vet_url(answer.target, settings, lookup=lookup)
        with pytest.raises(ToolError, match="allow_private"):
            await get(answer.target, settings, 1 << 20, lookup=lookup)
    assert "/article" not in site.hits
