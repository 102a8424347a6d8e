"""The dashboard's aiohttp application: security headers, the login gate, CSRF, pages, static.

Every response carries a Content-Security-Policy that allows only this origin (no inline
script or style: htmx is configured by a meta tag), `nosniff`, no framing, referrers to this
origin only (a login link's token never leaks to another site) and `no-store` on pages. Every
request but the login page and the static files needs a valid session cookie: a page asked for
without one redirects to the login page; anything else gets 401. Every POST must carry the
session's CSRF token (form field `csrf` or header `X-CSRF-Token`), else 403; one whose Origin
names another site is refused first (403), the login form's too. Without `allow_remote`, a
Host header that is not a loopback name is refused (a DNS-rebinding page cannot talk to us).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from atlas.dashboard import events, login
from atlas.dashboard.auth import SESSION_COOKIE
from atlas.dashboard.context import DASHBOARD, NAV, SESSION, Dashboard, dashboard_of
from atlas.dashboard.errors import errors
from atlas.dashboard.listen import loopback_host
from atlas.dashboard.pages import PAGES

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
OPEN_PATHS = ("/login", "/static/")  # reachable without a session
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    headers = response.headers
    headers["Content-Security-Policy"] = CSP
    headers["X-Content-Type-Options"] = "nosniff"
    headers["X-Frame-Options"] = "DENY"
    headers["Referrer-Policy"] = "same-origin"
    if not request.path.startswith("/static/"):
        headers["Cache-Control"] = "no-store"


def _wants_page(request: web.Request) -> bool:
    """A browser's navigation, not htmx or an EventSource (those get 401, not a login page)."""
    stream = "text/event-stream" in request.headers.get("Accept", "")
    return request.method == "GET" and "HX-Request" not in request.headers and not stream


def _same_origin(request: web.Request) -> bool:
    """A browser names the page a POST comes from (Origin); another site's is refused before
    anything else, the login form's included. Without the header (not a browser), the CSRF
    token decides."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    if not dashboard.home.settings.dashboard.allow_remote and not loopback_host(request.host):
        raise web.HTTPMisdirectedRequest(text="this dashboard answers to loopback names only")
    if request.method not in SAFE_METHODS and not _same_origin(request):
        raise web.HTTPForbidden(text="a form from another site may not change anything here")
    if request.path.startswith(OPEN_PATHS):
        return await handler(request)
    session = dashboard.signer.session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        if _wants_page(request):
            raise web.HTTPSeeOther("/login")
        raise web.HTTPUnauthorized(text="log in first: `atlas dashboard` prints a link")
    request[SESSION] = session
    if request.method not in SAFE_METHODS:
        form = await request.post()
        token = request.headers.get("X-CSRF-Token") or form.get("csrf")
        if not dashboard.signer.csrf_ok(session, token if isinstance(token, str) else None):
            log.warning(
                "dashboard: %s %s refused: missing or wrong CSRF token",
                request.method,
                request.path,
            )
            raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page and retry")
    return await handler(request)


def build_app(dashboard: Dashboard) -> web.Application:
    app = web.Application(middlewares=[errors, guard], client_max_size=256 * 1024)
    app[DASHBOARD] = dashboard
    app[NAV] = [(page.title, page.path) for page in PAGES]
    app.on_response_prepare.append(_security_headers)
    login.setup(app.router)
    events.setup(app.router)
    for page in PAGES:
        page.setup(app.router)
    app.router.add_static("/static/", STATIC)
    return app
