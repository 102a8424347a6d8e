"""Workbench: the home's executor instances (services.workbench: Atlas's delegate tasks and the
person's own sessions the Claude Code plugin reports) with state, folder and account, and the
subagents (running ones live, ended ones from atlas.db's delegations, paged); steer and stop
each. On this page the person acts themselves: no approval is asked (the gate's `workbench:`
rule is for a bot acting on the person's sessions), and each act is recorded in the gate's log
(run_kind dashboard)."""

from __future__ import annotations

from aiohttp import web

from atlas.agents.services import HomeServices
from atlas.agents.subagents import Subagent
from atlas.dashboard.actions import record_action
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.render import render, see_other
from atlas.errors import AtlasError
from atlas.executors.workbench import Instance
from atlas.workers.dashboard_ops import Acted, SubagentView, Workers

ENDED_PER_PAGE = 25  # ended subagents on one page
STOPPED_BY_PERSON = "stopped by the person on the dashboard"


def services_of(dashboard: Dashboard) -> HomeServices | None:
    """The running daemon's services (None when no daemon serves this page)."""
    services = dashboard.dispatcher.services if dashboard.dispatcher is not None else None
    return services if isinstance(services, HomeServices) else None


async def workbench_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    services = services_of(dashboard)
    instances: list[Instance] = services.workbench.list() if services is not None else []
    running: list[Subagent | SubagentView] = (
        list(services.subagents.running()) if services is not None else []
    )
    workers = Workers.of(dashboard.dispatcher)
    if workers is not None:  # the worker processes' bots' tasks and subagents
        theirs, subagents = await workers.workbench()
        every = instances + theirs
        instances = [i for i in every if not i.ended] + [i for i in every if i.ended]
        running += subagents
    text = request.query.get("page", "1")
    page = max(1, int(text)) if text.isdigit() else 1
    ended = await dashboard.home_reads.ended_subagents(
        offset=(page - 1) * ENDED_PER_PAGE, limit=ENDED_PER_PAGE + 1
    )
    return render(
        request,
        "workbench.html",
        daemon=services is not None,
        instances=instances,
        running=running,
        ended=ended[:ENDED_PER_PAGE],
        page=page,
        more=len(ended) > ENDED_PER_PAGE,
        done=request.query.get("done", ""),
    )


def _services(dashboard: Dashboard) -> HomeServices:
    services = services_of(dashboard)
    if services is None:
        raise web.HTTPConflict(text="the workbench lives in the daemon (`atlas run`), not here")
    return services


async def act_on_instance(request: web.Request) -> web.Response:
    """POST message (steer) or nothing (stop), on an executor instance."""
    dashboard = dashboard_of(request)
    action = request.match_info["action"]
    instance_id = request.match_info["id"]
    instance = _services(dashboard).workbench.get(instance_id)
    form = await request.post()
    message = str(form.get("message", "")).strip()
    if action == "steer" and not message:
        raise web.HTTPBadRequest(text="steer needs a message")
    if instance is None or instance.ended or instance.control is None:
        # not this process's: a worker process's bot's task, perhaps
        acted = await _act_elsewhere(dashboard, "instance", instance_id, action, message)
        bot, summary, how = acted.bot, acted.summary, acted.how
    else:
        try:
            if action == "steer":
                how = await instance.control.steer(message)
            else:
                await instance.control.stop(STOPPED_BY_PERSON)
                how = "stopped"
        except AtlasError as exc:  # ended meanwhile, a harness that refuses
            raise web.HTTPConflict(text=str(exc)) from None
        bot = instance.bot or ""
        summary = f"{action} {instance.id} ({instance.account}, {instance.folder})"
    await record_action(
        dashboard.audit,
        bot or dashboard.home.main_bot.name,
        "delegate",
        summary + (f": {message}" if message else ""),
        f"the person did it on the dashboard: {how}",
    )
    return see_other(f"/workbench?done={action}+{instance_id}")


async def _act_elsewhere(
    dashboard: Dashboard, kind: str, item_id: str, action: str, message: str
) -> Acted:
    """Steer or stop an instance or subagent a worker process runs; 409 when none does."""
    workers = Workers.of(dashboard.dispatcher)
    acted = None
    if workers is not None:
        try:
            acted = await workers.act(
                None, kind, item_id, action, message if action == "steer" else STOPPED_BY_PERSON
            )
        except AtlasError as exc:  # ended meanwhile, a harness that refuses
            raise web.HTTPConflict(text=str(exc)) from None
    if acted is None:
        raise web.HTTPConflict(text=f"{kind} {item_id!r} is not running")
    return acted


async def act_on_subagent(request: web.Request) -> web.Response:
    """POST message (steer) or nothing (stop), on a running subagent."""
    dashboard = dashboard_of(request)
    action = request.match_info["action"]
    manager = _services(dashboard).subagents
    sub_id = request.match_info["id"]
    sub = manager.get(sub_id)
    form = await request.post()
    message = str(form.get("message", "")).strip()
    if action == "steer" and not message:
        raise web.HTTPBadRequest(text="steer needs a message")
    if sub is None:  # a worker process's bot's subagent, perhaps
        acted = await _act_elsewhere(dashboard, "subagent", sub_id, action, message)
        bot = acted.bot
    elif action == "steer":
        manager.steer(sub, message)
        bot = sub.bot
    else:
        manager.stop(sub, STOPPED_BY_PERSON)
        bot = sub.bot
    await record_action(
        dashboard.audit,
        bot,
        "delegate",
        f"{action} subagent {sub_id}" + (f": {message}" if message else ""),
        "the person did it on the dashboard",
    )
    return see_other(f"/workbench?done={action}+{sub_id}")


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/workbench", workbench_page)
    router.add_post("/workbench/instance/{id}/{action:steer|stop}", act_on_instance)
    router.add_post("/workbench/subagent/{id}/{action:steer|stop}", act_on_subagent)


PAGE = Page("Workbench", "/workbench", setup)
