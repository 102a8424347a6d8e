"""Claude Code's argument names on the web tools: WebSearch's allowed_domains / blocked_domains,
passed to an engine that takes them and applied to every result; WebFetch's `prompt`, kept with
the page as a reminder. Fake engines and a fake page on 127.0.0.1; the model is scripted."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import RunContext, ToolRegistry, ToolResult
from atlas.tools.web import Domains, clear_cache, web_fetch, web_search
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

HITS = [
    ("https://docs.python.example/tutorial", "Tutorial"),
    ("https://www.pinterest.example/pin/1", "A pin"),
    ("https://python.example/", "Home"),
    ("https://notpython.example/x", "Look-alike"),
    ("https://blog.other.example/post", "A post"),
]
PAGE = "<html><head><title>Guide</title></head><body><article><h1>Guide</h1><p>Step one.</p></article></body></html>"


class FakeEngines:
    """Tavily and Brave that answer with HITS whatever they are asked, and record the asking."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/tavily", self._tavily)
        app.router.add_get("/brave", self._brave)
        app.router.add_get("/page", self._page)
        app.router.add_get("/away", self._away)
        return app

    async def _tavily(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("tavily", body))
        results = [{"title": t, "url": u, "content": "text"} for u, t in HITS]
        return web.json_response({"results": results[: body["max_results"]]})

    async def _brave(self, request: web.Request) -> web.Response:
        self.calls.append(("brave", dict(request.query)))
        return web.json_response({"web": {"results": [{"title": t, "url": u} for u, t in HITS]}})

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def _away(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("https://elsewhere.example/")


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[FakeEngines, int]]:
    clear_cache()
    engines = FakeEngines()
    runner = web.AppRunner(engines.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    with socket.socket() as s:  # ddgs has its own client: send it to a closed port
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("DDGS_PROXY", f"http://127.0.0.1:{s.getsockname()[1]}")
    yield engines, port
    await runner.cleanup()
    clear_cache()


def web_run(root: Path, port: int) -> RunContext:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f'\n[web]\ntavily_url = "http://127.0.0.1:{port}/tavily"\n'
        f'brave_url = "http://127.0.0.1:{port}/brave"\nsearch_timeout = 5.0\n'
        'allow_private = ["127.0.0.1"]\n'
    )
    return run_context(make_home(root, config=config))


async def search(run: RunContext, **arguments: Any) -> ToolResult:
    return await web_search.invoke(run, {"query": "python", **arguments})


def urls(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("https://")]


async def test_tavily_is_given_the_domains_and_the_results_are_filtered(
    home_path: Path, fake: tuple[FakeEngines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    engines, port = fake
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    run = web_run(home_path, port)
    result = await search(run, allowed_domains=["python.example"], limit=5)
    assert not result.is_error, result.text
    # Subdomains count; a look-alike host does not.
    assert urls(result.text) == ["https://docs.python.example/tutorial", "https://python.example/"]
    assert result.text.startswith("Tavily results for 'python' (only python.example):")
    assert "(3 results from other domains left out)" in result.text
    assert engines.calls[-1][1] == {
        "query": "python",
        "max_results": 15,  # asked generously: the filter thins them
        "include_domains": ["python.example"],
    }
    blocked = await search(run, blocked_domains=["https://www.pinterest.example/"], limit=2)
    assert urls(blocked.text) == [
        "https://docs.python.example/tutorial",
        "https://python.example/",
    ]
    assert engines.calls[-1][1]["exclude_domains"] == ["www.pinterest.example"]


async def test_engines_without_domain_parameters_get_site_operators(
    home_path: Path, fake: tuple[FakeEngines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    engines, port = fake
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "br-key")
    result = await search(
        web_run(home_path, port), allowed_domains=["other.example"], blocked_domains=["x.example"]
    )
    assert urls(result.text) == ["https://blog.other.example/post"]
    assert engines.calls[-1] == (
        "brave",
        {"q": "python site:other.example -site:x.example", "count": "15"},
    )


async def test_without_domains_nothing_changes(
    home_path: Path, fake: tuple[FakeEngines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    engines, port = fake
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    result = await search(web_run(home_path, port), limit=5)
    assert len(urls(result.text)) == 5 and "left out" not in result.text
    assert engines.calls[-1][1] == {"query": "python", "max_results": 5}


def test_domains_are_read_as_hosts() -> None:
    domains = Domains.parse(["*.Example.COM", "https://docs.rs/serde"], ["ads.example.com."])
    assert domains.allowed == ("example.com", "docs.rs")
    assert domains.admits("https://api.example.com/v1")
    assert not domains.admits("https://ads.example.com/")
    assert not domains.admits("https://example.org/")


async def test_a_domain_that_is_not_one_is_refused(home_path: Path) -> None:
    run = run_context(make_home(home_path))
    result = await search(run, allowed_domains=["not a domain"])
    assert result.is_error and "allowed_domains: 'not a domain'" in result.text


async def test_fetch_keeps_the_prompt_with_the_page(
    home_path: Path, fake: tuple[FakeEngines, int]
) -> None:
    _, port = fake
    run = web_run(home_path, port)
    url = f"http://127.0.0.1:{port}/page"
    result = await web_fetch.invoke(run, {"url": url, "prompt": "Find the first step"})
    assert not result.is_error, result.text
    assert result.text.startswith("(Fetched to answer: Find the first step)\n# Guide")
    again = await web_fetch.invoke(run, {"url": url})  # the cached page, with no prompt
    assert again.text.startswith("(cached copy from")
    blank = await web_fetch.invoke(run, {"url": url, "prompt": "  "})
    assert blank.text.startswith("(cached copy from")
    away = f"http://127.0.0.1:{port}/away"
    redirected = await web_fetch.invoke(run, {"url": away, "prompt": "Find the first step"})
    assert redirected.text.startswith("(Fetched to answer: Find the first step)\n")
    assert "redirects (HTTP 302) to another site: https://elsewhere.example/" in redirected.text


def test_the_schemas() -> None:
    assert {"allowed_domains", "blocked_domains"} <= set(web_search.spec().parameters["properties"])
    assert "prompt" not in web_fetch.spec().parameters["properties"]  # accepted, not advertised


async def test_through_the_model_loop(
    home_path: Path, fake: tuple[FakeEngines, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls as a Claude Code-trained model makes them, through the dispatcher and gate."""
    _, port = fake
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    home = web_run(home_path, port).home
    page = f"http://127.0.0.1:{port}/page"
    model = ScriptedModel(
        Reply(calls=[("web_search", {"query": "python", "blocked_domains": ["python.example"]})]),
        Reply(calls=[("web_fetch", {"url": page, "prompt": "What is step one?"})]),
        Reply("done"),
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry([web_search, web_fetch]))
    address = Address("atlas", "test", "chat-1", user="u1")
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    try:
        await dispatcher.submit(Inbound(address, "search"))
        await dispatcher.wait_idle(address)
        searched = model.requests[1].messages[-1].content
        assert "pinterest.example" in searched and "notpython.example" in searched
        assert "https://python.example/" not in searched and "docs.python" not in searched
        fetched = model.requests[2].messages[-1].content
        assert "(Fetched to answer: What is step one?)" in fetched and "Step one." in fetched
        model.assert_complete()
    finally:
        await dispatcher.shutdown()
        await runtime.close()
