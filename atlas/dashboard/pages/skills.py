"""The skills library's new-skill form and delete button, part of the Memory and skills page
(atlas/dashboard/pages/memory.py, which edits an existing skill). Both go through
skill_manage's own code (atlas/tools/skills.py): a new skill is staged, scanned, validated and
installed as `create` is (`write_skill_file`), a deleted one is archived as `delete` is
(`delete_skill`, restorable), each under the skills folder's lock. A refused create is shown
again with why, the person's text kept. Each change is recorded in the gate's log (run_kind
dashboard); the forms carry the CSRF token like every other."""

from __future__ import annotations

import asyncio

from aiohttp import web

from atlas.dashboard.actions import record_action
from atlas.dashboard.context import dashboard_of
from atlas.dashboard.render import render, see_other
from atlas.errors import ToolError
from atlas.skills.library import SkillError, check_skill_name
from atlas.tools.skills import delete_skill, write_skill_file

STARTER = """---
name: {name}
description: When to use this skill, in one line (how a bot finds it)
---
The steps to follow.
"""


def _form(
    request: web.Request, name: str, text: str, error: str = "", status: int = 200
) -> web.Response:
    return render(request, "skill_new.html", status=status, name=name, text=text, error=error)


async def new_skill_page(request: web.Request) -> web.Response:
    return _form(request, "", STARTER.format(name="my-skill"))


async def create(request: web.Request) -> web.Response:
    """POST name, text (the whole SKILL.md)."""
    dashboard = dashboard_of(request)
    form = await request.post()
    name = str(form.get("name", "")).strip()
    text = str(form.get("text", "")).replace("\r\n", "\n")
    try:
        check_skill_name(name)
    except SkillError as exc:
        return _form(request, name, text, error=str(exc), status=400)
    root = dashboard.home.main_bot.skills_dir  # the library: the main bot's own skills
    try:
        summary = await asyncio.to_thread(write_skill_file, root, name, text, None)
    except ToolError as exc:  # scan, frontmatter, a name taken: shown, the text kept
        return _form(request, name, text, error=str(exc), status=400)
    await record_action(
        dashboard.audit,
        dashboard.home.main_bot.name,
        "skill_manage",
        f"created skill {name}",
        f"the person created it on the dashboard: {summary}",
    )
    return see_other(f"/memory/skill/{name}?saved=1")


async def delete(request: web.Request) -> web.Response:
    """POST (only the CSRF token): the skill goes to the archive."""
    dashboard = dashboard_of(request)
    name = request.match_info["name"]
    root = dashboard.home.main_bot.skills_dir
    try:
        summary = await asyncio.to_thread(delete_skill, root, name)
    except ToolError as exc:
        raise web.HTTPNotFound(text=str(exc)) from None
    await record_action(
        dashboard.audit,
        dashboard.home.main_bot.name,
        "skill_manage",
        f"deleted skill {name}",
        f"the person deleted it on the dashboard: {summary}",
    )
    return see_other(f"/memory?deleted={name}")


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/memory/skills/new", new_skill_page)
    router.add_post("/memory/skills/new", create)
    router.add_post("/memory/skill/{name}/delete", delete)
