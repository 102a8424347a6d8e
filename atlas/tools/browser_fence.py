"""The browser worker's address policy: which URLs its Chromium may open or request.

Only http(s) and ws(s) reach the network; `data:`, `blob:` and `about:blank` involve no address
and pass; every other scheme (`file:`, `chrome:`, `view-source:`, `ftp:`, ...) is refused. A
host is normalised exactly as Chromium and web_fetch read it (IDNA/UTS-46, numeric IPv4
spellings: atlas/tools/web_access.py) and refused when it is a private, loopback or link-local
address not allowed by `[web] allow_private`.

Two layers, the proxy the strong one:
- Sandboxed, the worker has no network but the egress proxy, which resolves each name, checks
  every address after DNS and connects to the checked address (atlas/sandbox/proxy.py). There is
  no DNS inside, so this fence checks address literals only and leaves names to the proxy.
- Unsandboxed (`[sandbox] enabled = false`), this fence is the only one: it resolves each name
  and checks the answers, but Chromium resolves the name again itself (a DNS answer that changes
  in between is not caught), Playwright routes only the first URL of a redirect chain, and the
  worker's Python can open sockets of its own.
"""

from __future__ import annotations

import logging
from typing import Any

from atlas.config import WebSettings
from atlas.errors import ToolError
from atlas.tools.web_access import AccessPolicy, check_url, vet_url

log = logging.getLogger(__name__)

NO_ADDRESS = ("data:", "blob:")  # content made by the page itself
WEB_SCHEMES = ("http", "https")


class PageRefused(ToolError):
    """A URL the browser may not open."""


class PageFence:
    """Checks every URL Chromium asks for; `install` routes a browser context through it."""

    def __init__(self, allow_private: list[str], *, resolve: bool) -> None:
        self.settings = WebSettings(allow_private=allow_private)
        self.policy = AccessPolicy.from_settings(allow_private)
        self.resolve = resolve  # False behind the egress proxy (no DNS in the sandbox)
        self.refused: list[str] = []  # why requests were refused, newest last (for messages)

    async def refusal(self, url: str) -> str | None:
        """Why `url` may not be opened, or None when it may."""
        lowered = url.strip().lower()
        if lowered.startswith(NO_ADDRESS) or lowered in ("about:blank", "about:srcdoc"):
            return None
        scheme, _, rest = url.strip().partition(":")
        scheme = scheme.lower()
        if scheme in ("ws", "wss"):  # a websocket's host is fenced like a page's
            url, scheme = f"{'https' if scheme == 'wss' else 'http'}:{rest}", "http"
        if scheme not in WEB_SCHEMES:
            return f"{scheme}: addresses are not opened by the browser (http and https only)"
        try:
            if self.resolve:
                await vet_url(url, self.settings)
            else:
                check_url(url, self.policy)
        except ToolError as exc:
            return str(exc)
        return None

    async def check(self, url: str) -> None:
        """Raise PageRefused when `url` may not be opened (before a navigation)."""
        if reason := await self.refusal(url):
            raise PageRefused(f"blocked by Atlas: {url}: {reason}")

    async def install(self, context: Any) -> None:
        """Route every request of `context` (pages, frames, subresources, fetch/XHR and
        websockets) through the fence."""
        await context.route("**/*", self._on_request)
        await context.route_web_socket("**/*", self._on_websocket)

    async def _on_request(self, route: Any, request: Any) -> None:
        reason = await self.refusal(request.url)
        if reason is None:
            await route.continue_()
            return
        self._note(request.url, reason)
        await route.abort("blockedbyclient")

    async def _on_websocket(self, socket: Any) -> None:
        reason = await self.refusal(socket.url)
        if reason is None:
            socket.connect_to_server()
            return
        self._note(socket.url, reason)
        await socket.close(code=1008, reason="blocked by Atlas")

    def _note(self, url: str, reason: str) -> None:
        log.info("browser: refused %s: %s", url[:200], reason)
        self.refused = [*self.refused[-19:], f"{url[:200]}: {reason}"]
