"""Logging in with a one-time link, and out.

The link `atlas dashboard` prints opens a page with a button: the token is used by the POST
that button sends, so a link previewer that fetches the URL does not spend it.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from atlas.dashboard.auth import SESSION_COOKIE, SESSION_DAYS, use_login_token
from atlas.dashboard.context import dashboard_of
from atlas.dashboard.render import render, see_other

log = logging.getLogger(__name__)


async def login_page(request: web.Request) -> web.Response:
    token = request.query.get("token", "")
    return render(request, "login.html", token=token, failed=False)


async def log_in(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    token = (await request.post()).get("token")
    used = isinstance(token, str) and bool(token)
    if used:
        used = await asyncio.to_thread(use_login_token, dashboard.home.root, str(token))
    if not used:
        log.warning("dashboard: a login link was refused (used before, expired or unknown)")
        return render(request, "login.html", status=403, token="", failed=True)
    _, cookie = dashboard.signer.new_session()
    response = see_other("/")
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=SESSION_DAYS * 86400,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    log.info("dashboard: logged in from %s", request.remote)
    return response


async def log_out(request: web.Request) -> web.Response:
    response = see_other("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/login", login_page)
    router.add_post("/login", log_in)
    router.add_post("/logout", log_out)
