"""Usage: tokens and cost per bot per day (the home's days), as plots drawn on the server and
as a table. Cost is shown for models `[dashboard] prices` names."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from aiohttp import web

from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.plot import Bars, stacked_bars
from atlas.dashboard.queries import UsageRow
from atlas.dashboard.render import render

SPANS = (7, 30, 90)


@dataclass
class DayUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    priced: bool = True  # False when a model used that day has no price

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def cost_of(row: UsageRow, prices: dict[str, list[float]]) -> float | None:
    """USD for one row; None when its model has no price. Cached input is billed at its own
    price when one is given (input_tokens counts the whole prompt, cached tokens included)."""
    price = prices.get(row.model)
    if price is None:
        return None
    cached_price = price[2] if len(price) > 2 else price[0]
    cached = min(row.cache_read_tokens, row.input_tokens)
    fresh = row.input_tokens - cached
    return (fresh * price[0] + cached * cached_price + row.output_tokens * price[1]) / 1e6


async def usage_by_day(dashboard: Dashboard, first: date) -> dict[str, dict[date, DayUsage]]:
    zone = dashboard.zone
    since = datetime.combine(first, time(), zone)
    prices = dashboard.home.settings.dashboard.prices

    async def one_bot(name: str) -> tuple[str, list[UsageRow]]:
        store = await dashboard.store(dashboard.home.bots[name])
        if store is None:
            return name, []
        return name, await dashboard.usage.rows(name, store, since)

    found = await asyncio.gather(*(one_bot(name) for name in dashboard.home.bots))
    days: dict[str, dict[date, DayUsage]] = {}
    local_day: dict[str, date] = {}  # UTC hour -> the home's day: each hour converted once
    for name, rows in found:
        per_day: dict[date, DayUsage] = defaultdict(DayUsage)
        for row in rows:
            day = local_day.get(row.hour)
            if day is None:
                moment = datetime.fromisoformat(f"{row.hour}:00:00+00:00")
                day = local_day[row.hour] = moment.astimezone(zone).date()
            usage = per_day[day]
            usage.input_tokens += row.input_tokens
            usage.output_tokens += row.output_tokens
            cost = cost_of(row, prices)
            if cost is None:
                usage.priced = usage.priced and row.input_tokens + row.output_tokens == 0
            else:
                usage.cost += cost
        days[name] = dict(per_day)
    return days


def _day_cost(usages: list[DayUsage | None]) -> float | None:
    """The day's cost over every bot; None when a model used that day has no price."""
    used = [u for u in usages if u is not None]
    return sum(u.cost for u in used) if all(u.priced for u in used) else None


async def usage_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    span = int(request.query.get("days", "30")) if request.query.get("days", "").isdigit() else 30
    span = span if span in SPANS else 30
    today = dashboard.now().date()
    dates = [today - timedelta(days=n) for n in range(span - 1, -1, -1)]
    days = await usage_by_day(dashboard, dates[0])
    labels = [d.isoformat() for d in dates]
    empty = DayUsage()
    tokens = Bars(labels, {b: [float(days[b].get(d, empty).tokens) for d in dates] for b in days})
    costs = Bars(labels, {b: [days[b].get(d, empty).cost for d in dates] for b in days}, unit="USD")
    has_cost = any(any(v > 0 for v in values) for values in costs.series.values())
    # One row a day (newest first), a cell a bot; the day's cost over every bot.
    table = [
        (d, [days[b].get(d) for b in days], _day_cost([days[b].get(d) for b in days]))
        for d in reversed(dates)
        if any(d in days[b] for b in days)
    ]
    return render(
        request,
        "usage.html",
        span=span,
        spans=SPANS,
        series=list(days),
        token_plot=stacked_bars(tokens, f"Tokens per day, last {span} days"),
        cost_plot=stacked_bars(costs, f"Cost per day (USD), last {span} days")
        if has_cost
        else None,
        table=table,
        priced=bool(dashboard.home.settings.dashboard.prices),
    )


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/usage", usage_page)


PAGE = Page("Usage", "/usage", setup)
