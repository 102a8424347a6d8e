"""web_search (Tavily, Brave, then keyless ddgs) and web_fetch (pages as Markdown, documents
through markitdown), both answering as untrusted data."""

from __future__ import annotations

import asyncio
import hashlib
import html
import logging
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from atlas.errors import ToolError
from atlas.tools.documents import DOCUMENT_SUFFIXES, MAX_DOCUMENT_BYTES
from atlas.tools.registry import RunContext, Tool, tool
from atlas.tools.web_access import CrossSiteRedirect, Response, get

if TYPE_CHECKING:
    from atlas.config import WebSettings

log = logging.getLogger(__name__)

MAX_PAGE_BYTES = 10 * 1024 * 1024
MAX_CACHED_PAGES = 200  # per home; the oldest go first
DOCUMENT_TYPES = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
    "application/epub+zip": ".epub",
}
MAX_FILTERED_ASK = 20  # results asked of an engine when a domain filter will thin them
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


# ---- web_search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    excerpt: str


@dataclass(frozen=True)
class Domains:
    """web_search's allowed_domains / blocked_domains (Claude Code's WebSearch): a domain
    covers its subdomains. Passed to an engine that takes them, applied to every result."""

    allowed: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()

    @classmethod
    def parse(cls, allowed: Sequence[str], blocked: Sequence[str]) -> Domains:
        return cls(_domains("allowed_domains", allowed), _domains("blocked_domains", blocked))

    def __bool__(self) -> bool:
        return bool(self.allowed or self.blocked)

    def admits(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")

        def within(domain: str) -> bool:
            return host == domain or host.endswith("." + domain)

        if any(within(d) for d in self.blocked):
            return False
        return not self.allowed or any(within(d) for d in self.allowed)

    def with_operators(self, query: str) -> str:
        """The query with site: operators, for engines without domain parameters (Brave,
        DuckDuckGo): they narrow the search; the filter on the results is what holds."""
        parts = [query]
        if len(self.allowed) == 1:
            parts.append(f"site:{self.allowed[0]}")
        parts += [f"-site:{d}" for d in self.blocked]
        return " ".join(parts)

    def describe(self) -> str:
        said = [f"only {', '.join(self.allowed)}"] if self.allowed else []
        said += [f"not {', '.join(self.blocked)}"] if self.blocked else []
        return "; ".join(said)


def _domains(key: str, entries: Sequence[str]) -> tuple[str, ...]:
    """`example.com`, `https://www.example.com/x` or `*.example.com`: the host part, lower case."""
    found: list[str] = []
    for entry in entries:
        host = entry.strip().lower().split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        host = host.lstrip("*.").rstrip(".")
        if not host or " " in host:
            raise ToolError(f"{key}: {entry!r} is not a domain (e.g. example.com)")
        found.append(host)
    return tuple(dict.fromkeys(found))


Engine = Callable[["WebSettings", str, str, int, Domains], Awaitable[list[SearchHit]]]
_TAGS = re.compile(r"<[^>]+>")


def _plain(text: str) -> str:
    """Brave's excerpts carry <strong> tags and entities."""
    return html.unescape(_TAGS.sub("", text or "")).strip()


async def _post_json(settings: WebSettings, url: str, **kwargs: Any) -> Any:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=settings.search_timeout)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(url=url, **kwargs) as resp,
    ):
        if resp.status >= 400:
            raise ToolError(f"HTTP {resp.status} from {url}")
        return await resp.json(content_type=None)


async def _tavily(
    settings: WebSettings, key: str, query: str, limit: int, domains: Domains
) -> list[SearchHit]:
    body: dict[str, Any] = {"query": query, "max_results": limit}
    if domains.allowed:
        body["include_domains"] = list(domains.allowed)
    if domains.blocked:
        body["exclude_domains"] = list(domains.blocked)
    data = await _post_json(
        settings,
        settings.tavily_url,
        method="POST",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
    )
    return [
        SearchHit(r.get("title") or "", r["url"], r.get("content") or "")
        for r in data["results"][:limit]
    ]


async def _brave(
    settings: WebSettings, key: str, query: str, limit: int, domains: Domains
) -> list[SearchHit]:
    data = await _post_json(
        settings,
        settings.brave_url,
        method="GET",
        params={"q": domains.with_operators(query), "count": str(limit)},
        headers={"X-Subscription-Token": key, "Accept": "application/json"},
    )
    results = (data.get("web") or {}).get("results") or []
    return [
        SearchHit(_plain(r.get("title", "")), r["url"], _plain(r.get("description", "")))
        for r in results[:limit]
    ]


async def _ddgs(
    settings: WebSettings, _key: str, query: str, limit: int, domains: Domains
) -> list[SearchHit]:
    def search() -> list[dict[str, Any]]:
        from ddgs import DDGS  # its own HTTP client; DDGS_PROXY in the environment routes it

        searched = domains.with_operators(query)
        return DDGS(timeout=int(settings.search_timeout)).text(searched, max_results=limit)

    async with asyncio.timeout(settings.search_timeout + 5):
        rows = await asyncio.to_thread(search)
    return [SearchHit(r.get("title", ""), r["href"], r.get("body", "")) for r in rows[:limit]]


def _engines(settings: WebSettings) -> list[tuple[str, str, Engine]]:
    """(name, key, engine) for every engine usable now, in the order they are tried."""
    import os

    engines: list[tuple[str, str, Engine]] = []
    if key := os.environ.get(settings.tavily_api_key_env, "").strip():
        engines.append(("Tavily", key, _tavily))
    if key := os.environ.get(settings.brave_api_key_env, "").strip():
        engines.append(("Brave", key, _brave))
    engines.append(("DuckDuckGo (ddgs)", "", _ddgs))
    return engines


def _format_hits(
    engine: str,
    query: str,
    hits: list[SearchHit],
    failures: list[str],
    domains: Domains = Domains(),
    left_out: int = 0,
) -> str:
    lines = [f"{engine} results for {query!r}:"]
    if domains:
        lines[0] = f"{engine} results for {query!r} ({domains.describe()}):"
    if failures:
        lines[0] += f" (after {'; '.join(failures)})"
    if not hits:
        lines.append("No results.")
    for number, hit in enumerate(hits, 1):
        lines.append(f"{number}. {hit.title or '(no title)'}\n   {hit.url}")
        if excerpt := " ".join(hit.excerpt.split()):
            lines.append(f"   {excerpt[:500]}")
    if left_out:
        lines.append(f"({left_out} results from other domains left out)")
    return "\n".join(lines)


@tool(read_only=True, untrusted=True)
async def web_search(
    run: RunContext,
    query: str,
    limit: Annotated[int, Field(ge=1, le=10)] = 5,
    allowed_domains: Annotated[
        tuple[str, ...], Field(description="only results from these (subdomains too)")
    ] = (),
    blocked_domains: Annotated[tuple[str, ...], Field(description="never from these")] = (),
) -> str:
    """Search the web: each result's title, address and excerpt. Read a result with web_fetch."""
    if not query.strip():
        raise ToolError("query is empty")
    domains = Domains.parse(allowed_domains, blocked_domains)
    # Filtered results are asked for generously: the filter may leave out some of them.
    asked = min(limit * 3, MAX_FILTERED_ASK) if domains else limit
    settings = run.settings.web
    failures: list[str] = []
    for name, key, engine in _engines(settings):
        try:
            found = await engine(settings, key, query, asked, domains)
        except Exception as exc:  # any engine fault falls through to the next engine
            log.warning("web_search: %s failed", name, exc_info=True)
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            failures.append(f"{name} failed: {reason or type(exc).__name__}")
            continue
        hits = [hit for hit in found if domains.admits(hit.url)]
        left_out = len(found) - len(hits)
        return _format_hits(name, query, hits[:limit], failures, domains, left_out)
    raise ToolError(f"web search failed with every engine: {'; '.join(failures)}")


# ---- web_fetch: reading ------------------------------------------------------------------------


def _document_suffix(response: Response) -> str | None:
    if suffix := DOCUMENT_TYPES.get(response.content_type):
        return suffix
    if response.content_type not in ("application/octet-stream", "binary/octet-stream"):
        return None
    # A generic download: the file's name (Content-Disposition, else the address) tells.
    name = (response.filename or response.url.split("?", 1)[0].split("#", 1)[0]).lower()
    return next((s for s in DOCUMENT_SUFFIXES if name.endswith(s)), None)


def _extract_html(body: bytes, url: str) -> str:
    """The page's main content as Markdown, headed by its title, address and date."""
    import trafilatura  # heavy: only when a page is read

    options: dict[str, Any] = {
        "url": url,
        "output_format": "markdown",
        "include_links": True,
        "include_tables": True,
        "include_formatting": True,
    }
    text = trafilatura.extract(body, **options) or trafilatura.extract(
        body, favor_recall=True, **options
    )
    if not text:
        text = trafilatura.html2txt(body) or ""
    meta = trafilatura.extract_metadata(body, default_url=url)
    header = [f"# {meta.title}" if meta and meta.title else "# (untitled page)", f"Address: {url}"]
    if meta and meta.date:
        header.append(f"Date: {meta.date}")
    return "\n".join(header) + "\n\n" + text.strip() + "\n"


def _convert_document(body: bytes, suffix: str, url: str) -> str:
    """A fetched document as Markdown, converted as read_file converts it (markitdown)."""
    from atlas.tools.documents import convert_document  # one shared markitdown converter

    with tempfile.TemporaryDirectory(prefix="atlas-web-") as folder:
        path = Path(folder) / f"document{suffix}"
        path.write_bytes(body)
        try:
            text = convert_document(path)
        except ToolError as exc:
            raise ToolError(str(exc).replace(str(path), url)) from None
    if not text.strip():
        text = "(no text: the document may hold only scanned images)"
    return f"# {url.rsplit('/', 1)[-1] or url}\nAddress: {url}\nDocument: {suffix}\n\n{text}\n"


def _decode_text(response: Response) -> str:
    text = response.body.decode(response.charset or "utf-8", errors="replace")
    return f"Address: {response.url}\nType: {response.content_type}\n\n{text}\n"


async def _read(response: Response) -> str:
    if suffix := _document_suffix(response):
        return await asyncio.to_thread(_convert_document, response.body, suffix, response.url)
    kind = response.content_type
    looks_html = kind in ("", "application/octet-stream") and response.body.lstrip()[:1] == b"<"
    if kind in HTML_TYPES or looks_html:
        return await asyncio.to_thread(_extract_html, response.body, response.url)
    if kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return _decode_text(response)
    raise ToolError(
        f"{response.url} is {kind or 'of no stated type'}: web_fetch reads web pages, text and "
        f"documents ({' '.join(DOCUMENT_SUFFIXES)})"
    )


# ---- web_fetch: cache, budget --------------------------------------------------------------


@dataclass(frozen=True)
class _CachedPage:
    fetched_at: float  # time.monotonic()
    text: str


_cache: dict[Path, dict[str, _CachedPage]] = {}


def _cached(root: Path, url: str, ttl: float) -> _CachedPage | None:
    page = _cache.get(root, {}).get(url)
    if page is None or time.monotonic() - page.fetched_at > ttl:
        return None
    return page


def _remember(root: Path, url: str, text: str, ttl: float) -> None:
    if ttl <= 0:
        return
    pages = _cache.setdefault(root, {})
    now = time.monotonic()
    for stale in [u for u, p in pages.items() if now - p.fetched_at > ttl]:
        del pages[stale]
    while len(pages) >= MAX_CACHED_PAGES:
        del pages[next(iter(pages))]  # dicts keep insertion order: the oldest first
    pages[url] = _CachedPage(now, text)


def clear_cache() -> None:
    """Forget every cached page (tests; a daemon never needs it)."""
    _cache.clear()


def fit_to_budget(text: str, limit: int, spill_path: Path) -> str:
    """`text` when it fits; else the first 3/4 and the last 1/4 of `limit`, the whole text in
    `spill_path`, and the read_file offset of the part left out."""
    if len(text) <= limit:
        return text
    spill_path.parent.mkdir(parents=True, exist_ok=True)
    spill_path.write_text(text, encoding="utf-8")
    head = text[: limit * 3 // 4]
    head = head[: head.rfind("\n") + 1] or head  # whole lines, so the offset below is exact
    tail_start = len(text) - limit // 4
    newline = text.find("\n", tail_start)
    tail_start = newline + 1 if newline != -1 else tail_start
    first_left_out = head.count("\n") + 1
    last_left_out = text.count("\n", 0, tail_start)
    return (
        f"{head}\n[... {tail_start - len(head):,} characters (lines {first_left_out}-"
        f"{last_left_out}) left out. The whole page is in {spill_path}: read_file "
        f"path={str(spill_path)!r} offset={first_left_out} ...]\n\n{text[tail_start:]}"
    )


def _spill_path(run: RunContext, url: str) -> Path:
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return run.home.spill_dir / run.bot.name / str(run.conversation_id) / f"web-{digest}.md"


@tool(read_only=True, failure_tolerant=True, pages_itself=True, untrusted=True)
async def web_fetch(
    run: RunContext,
    url: str,
    char_limit: Annotated[int, Field(ge=2_000, le=500_000)] = 15_000,
    # Claude Code's WebFetch `prompt` (what to look for): no model reads the page for it here,
    # so it is kept with the page as a reminder. Accepted, not advertised.
    prompt: SkipJsonSchema[str | None] = None,
) -> str:
    """Read a web page (http/https) as Markdown with title and date; PDF and Office documents too.
    A redirect to another site is returned, not followed. Recent pages come from a cache."""
    settings = run.settings.web
    url = url.strip()
    ttl = settings.cache_minutes * 60
    note = ""
    if page := _cached(run.home.root, url, ttl):
        text = page.text
        note = f"(cached copy from {int((time.monotonic() - page.fetched_at) // 60)} min ago)\n"
    else:
        answer = await get(url, settings, max(MAX_PAGE_BYTES, MAX_DOCUMENT_BYTES))
        if isinstance(answer, CrossSiteRedirect):
            return _hint(prompt) + (
                f"{answer.source} redirects (HTTP {answer.status}) to another site: "
                f"{answer.target}\nNot followed. To read it, call web_fetch with that address."
            )
        if _document_suffix(answer) is None and len(answer.body) > MAX_PAGE_BYTES:
            raise ToolError(f"{answer.url}: a page over {MAX_PAGE_BYTES // 2**20} MB is refused")
        text = await _read(answer)
        _remember(run.home.root, url, text, ttl)
    fitted = await asyncio.to_thread(fit_to_budget, text, char_limit, _spill_path(run, url))
    return _hint(prompt) + note + fitted


def _hint(prompt: str | None) -> str:
    """Claude Code's WebFetch `prompt`, as a first line that reminds the model why it fetched."""
    words = " ".join((prompt or "").split())
    return f"(Fetched to answer: {words[:500]})\n" if words else ""


WEB_TOOLS: list[Tool] = [web_search, web_fetch]
