"""Memory and skills: the home's USER.md, each bot's MEMORY.md and the skills library
(<home>/skills/<name>/SKILL.md), viewed and edited by the person (a skill made or deleted too:
atlas/dashboard/pages/skills.py). An edit goes through the
tools' own checks (atlas/tools/memory.py rewrite_file, atlas/tools/skills.py write_skill_file:
the threat scan, the size limits, USER.md's lock, a skill's kept previous version); a refused
edit is shown again with why, the text still in the form. Each saved edit is recorded in the
gate's log (run_kind dashboard)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from atlas.dashboard.actions import record_action
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.pages import skills
from atlas.dashboard.render import render, see_other
from atlas.errors import AtlasError, ToolError
from atlas.home import Home
from atlas.secrets import MASK
from atlas.skills.library import Library, Skill, discover
from atlas.tools.memory import MEMORY_FILES, rewrite_file
from atlas.tools.skills import write_skill_file

SKILLS_PER_PAGE = 40


def library(home: Home) -> Library:
    """The home's skills library, as the main bot sees it."""
    return discover(home.skills_dir, home.main_bot.skills_dir)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


async def memory_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    home = dashboard.home
    skills = sorted(library(home).skills.values(), key=lambda s: s.name)
    text = request.query.get("page", "1")
    page = max(1, int(text)) if text.isdigit() else 1
    shown = skills[(page - 1) * SKILLS_PER_PAGE : page * SKILLS_PER_PAGE]
    return render(
        request,
        "memory.html",
        user_size=len(_read(home.user_profile_path).strip()),
        user_limit=MEMORY_FILES["user"].limit,
        bots=[
            (bot.name, len(_read(bot.memory_dir / "MEMORY.md").strip()))
            for bot in home.bots.values()
        ],
        memory_limit=MEMORY_FILES["memory"].limit,
        skills=shown,
        page=page,
        more=len(skills) > page * SKILLS_PER_PAGE,
        saved=request.query.get("saved", ""),
        deleted=request.query.get("deleted", ""),
    )


class Editable:
    """One file the page edits: where it is, what it is called, and how an edit is saved."""

    def __init__(
        self,
        title: str,
        path: Path,
        action: str,
        bot: str,
        tool: str,
        save: Callable[[str], str],
        limit: int | None = None,
    ) -> None:
        self.title, self.path, self.action, self.bot, self.tool = title, path, action, bot, tool
        self.save, self.limit = save, limit
        self.deletable = tool == "skill_manage"  # a skill has a Delete button; the notes do not


def editable(dashboard: Dashboard, request: web.Request) -> Editable:
    home = dashboard.home
    kind = request.match_info["kind"]
    name = request.match_info.get("name", "")
    if kind == "user":
        spec = MEMORY_FILES["user"]
        path = home.user_profile_path
        return Editable(
            "USER.md (who you are; every bot reads it)",
            path,
            "/memory/user",
            home.main_bot.name,
            "memory",
            lambda text: rewrite_file(path, spec, text),
            spec.limit,
        )
    if kind == "bot" and name in home.bots:
        spec = MEMORY_FILES["memory"]
        path = home.bots[name].memory_dir / spec.file_name
        return Editable(
            f"{name}'s MEMORY.md",
            path,
            f"/memory/bot/{name}",
            name,
            "memory",
            lambda text: rewrite_file(path, spec, text),
            spec.limit,
        )
    if kind == "skill":
        skill: Skill | None = library(home).skills.get(name)
        if skill is not None:
            root = home.main_bot.skills_dir
            return Editable(
                f"Skill {name}: SKILL.md",
                skill.skill_file,
                f"/memory/skill/{name}",
                home.main_bot.name,
                "skill_manage",
                lambda text: write_skill_file(root, name, text, skill),
            )
    raise web.HTTPNotFound(text=f"there is no {kind} {name!r} to edit here")


def _form(
    request: web.Request, target: Editable, text: str, error: str = "", status: int = 200
) -> web.Response:
    return render(
        request,
        "memory_edit.html",
        status=status,
        target=target,
        text=text,
        error=error,
        saved=request.query.get("saved", ""),
    )


async def edit_page(request: web.Request) -> web.Response:
    target = editable(dashboard_of(request), request)
    return _form(request, target, await asyncio.to_thread(_read, target.path))


async def save(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    target = editable(dashboard, request)
    form = await request.post()
    text = str(form.get("text", "")).replace("\r\n", "\n")
    if MASK in text and MASK not in await asyncio.to_thread(_read, target.path):
        # The file holds a secret the page showed masked: saving would write the mask over it.
        why = (
            f"the file holds a secret, shown here as {MASK}; saving would replace it with that "
            f"text. Edit {target.path} in a text editor instead."
        )
        return _form(request, target, text, error=why, status=400)
    try:
        # In a thread: USER.md's lock may wait for another process.
        summary = await asyncio.to_thread(target.save, text)
    except (ToolError, AtlasError) as exc:  # refused: shown, the person's text kept
        return _form(request, target, text, error=str(exc), status=400)
    await record_action(
        dashboard.audit,
        target.bot,
        target.tool,
        f"edited {target.path.relative_to(dashboard.home.root)}",
        f"the person edited it on the dashboard: {summary}",
    )
    return see_other(f"{target.action}?saved=1")


def setup(router: web.UrlDispatcher) -> None:
    skills.setup(router)  # a new skill, a deleted one (before the edit routes)
    router.add_get("/memory", memory_page)
    router.add_get("/memory/{kind:user}", edit_page)
    router.add_post("/memory/{kind:user}", save)
    router.add_get("/memory/{kind:bot|skill}/{name}", edit_page)
    router.add_post("/memory/{kind:bot|skill}/{name}", save)


PAGE = Page("Memory", "/memory", setup)
