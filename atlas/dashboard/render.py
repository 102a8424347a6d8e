"""Jinja2 templates (autoescaped) and the values every page gets: nav, CSRF token, time zone."""

from __future__ import annotations

import os
import re
from datetime import datetime
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from atlas.dashboard.context import NAV, SESSION, Dashboard, dashboard_of
from atlas.secrets import MASK, MIN_SECRET_LENGTH, secret_env_names

_MARKED = re.compile(r"\*\*(.+?)\*\*", re.S)


def _when(value: str | None, zone: ZoneInfo) -> str:
    """A stored UTC ISO time as the home's local time, short."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M")


def marks(snippet: str | None) -> Markup:
    """A search snippet (matches between **…**) escaped, with the matches in <mark>."""
    text = str(escape(snippet or ""))
    return Markup(_MARKED.sub(lambda m: f"<mark>{m.group(1)}</mark>", text))


def number(value: int | float | None) -> str:
    return f"{value or 0:,}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("atlas.dashboard", "templates"),
        autoescape=True,  # every value is escaped unless a filter says it made safe HTML
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the test, not the page silently
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["marks"] = marks
    env.filters["number"] = number
    return env


def render(request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
    dashboard = dashboard_of(request)
    session = request.get(SESSION)
    zone = dashboard.zone
    page = {
        "nav": request.app[NAV],
        "path": request.path,
        "csrf": dashboard.signer.csrf_token(session) if session else "",
        "zone": dashboard.home.settings.timezone,
        "when": lambda value: _when(value, zone),
        **values,
    }
    html = environment().get_template(template).render(page)
    return web.Response(text=masked(html, dashboard), status=status, content_type="text/html")


def masked(html: str, dashboard: Dashboard) -> str:
    """`html` with every secret value Atlas knows replaced by [secret]: the environment
    variables the config names as secrets (a message or a tool result may quote one) and the
    dashboard's own secret, raw or HTML-escaped."""
    values = {os.environ[n] for n in secret_env_names(dashboard.home) if os.environ.get(n)}
    values.add(dashboard.signer.secret_text)
    for value in sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True):
        html = html.replace(value, MASK).replace(str(escape(value)), MASK)
    return html


def see_other(location: str) -> web.Response:
    """A 303 to `location` (after a POST: the browser then GETs the page)."""
    return web.Response(status=303, headers={"Location": location})
