"""browser_exec: Python that drives the home's own Chromium, run in a worker process kept alive
per home and bot (browser_worker.py), so tabs, cookies and the workspace last across calls.

The worker runs in the bubblewrap sandbox (atlas/sandbox/launcher.py) unless `[sandbox] enabled =
false`: the bot's workspace and its browser folder `<home>/browser/<bot>/` (the profile) are
writable, the rest of the home is hidden, it gets the allow-listed environment, and it has no
network but the egress proxy, which lets its pages reach any public host and no private,
loopback or link-local address. Its pages also pass the fence of browser_fence.py. Sandboxed,
the browser is headless (no display inside).

The runtime calls `close_browsers(home)` at shutdown: each worker closes its browser and ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from atlas.errors import ToolError
from atlas.providers.base import Image
from atlas.tools.browser_find import BrowserNotFound, find_browser, sandbox_folders
from atlas.tools.registry import RunContext, Tool, ToolResult, tool

if TYPE_CHECKING:
    from atlas.home import Home

log = logging.getLogger(__name__)

Mode = Literal["profile", "clean", "headless"]
START_TIMEOUT = 60.0  # seconds for the worker to launch Chromium
REPLY_GRACE = 15.0  # past timeout_s, how long the worker has to report a stopped call
CLOSE_GRACE = 10.0  # seconds a worker has to close its browser before it is killed
MAX_IMAGE_BYTES = 5 * 1024 * 1024
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
SANDBOX_PROXY = "http://127.0.0.1:3128"  # the egress proxy's bridge inside the sandbox
_SHOT_PATH = re.compile(r"(/[^\s'\"<>|]+\.(?:png|jpe?g))", re.IGNORECASE)


def chrome_missing(run: RunContext) -> str | None:
    """Why the run has no browser_exec (no Chrome, Edge or Chromium found, or [browser] chrome
    names none), or None."""
    try:
        find_browser(run.settings.browser.chrome, run.home.config_path)
    except BrowserNotFound as exc:
        return f"not available: {exc}"
    return None


def _browser(run: RunContext) -> Path:
    try:
        return find_browser(run.settings.browser.chrome, run.home.config_path).path
    except BrowserNotFound as exc:
        raise ToolError(str(exc)) from None


@dataclass
class _Worker:
    process: asyncio.subprocess.Process
    mode: Mode
    log_path: Path
    exits: contextlib.AsyncExitStack  # its egress channel, closed when it ends
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    next_id: int = 0
    abandoned: set[int] = field(default_factory=set)  # calls cancelled; their replies are dropped

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise ToolError(f"the browser worker ended unexpectedly; see {self.log_path}")
        return json.loads(line)


_workers: dict[tuple[Path, str], _Worker] = {}
_start_locks: dict[tuple[Path, str], asyncio.Lock] = {}  # one start at a time per home and bot


def _display_available() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _worker_config(
    run: RunContext, mode: Mode, sandboxed: bool
) -> tuple[dict[str, Any], Path, Path]:
    """The worker's config, its workspace and its log file (folders made)."""
    folder = browser_folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    workspace = run.bot.workspace / "browser"
    workspace.mkdir(parents=True, exist_ok=True)
    settings = run.settings.browser
    config = {
        "chrome": str(_browser(run)),
        "mode": mode,
        # Only "profile" and "clean" show a window, and only where there is a screen to show it
        # (there is none in the sandbox).
        "headless": mode == "headless" or sandboxed or not _display_available(),
        "profile_dir": str(folder / "profile"),
        "workspace": str(workspace),
        "extra_args": list(settings.extra_args),
        "allow_private": list(run.settings.web.allow_private),
        "proxy": SANDBOX_PROXY if sandboxed else None,
    }
    return config, workspace, folder / "worker.log"


def browser_folder(run: RunContext) -> Path:
    """The bot's browser folder in the home: its profile (logins) and the worker's log."""
    return run.home.root / "browser" / run.bot.name


async def _public_web(host: str) -> bool:
    """The egress proxy's question for the browser: any public host may be reached, like
    web_fetch (the proxy's address fence still refuses private and loopback addresses)."""
    return True


async def _launch(
    run: RunContext, config: dict[str, Any], workspace: Path, exits: contextlib.AsyncExitStack
) -> tuple[list[str], dict[str, str]]:
    """The worker's command line and environment: in the sandbox unless it is off."""
    from atlas.sandbox.launcher import probe, sandbox_argv
    from atlas.sandbox.policy import allowed_env, policy_for

    argv = [sys.executable, "-m", "atlas.tools.browser_worker", json.dumps(config)]
    env = {**allowed_env(run.home, run.bot), "BH_AGENT_WORKSPACE": str(workspace)}
    if not config["proxy"]:  # [sandbox] enabled = false: a window where there is a screen
        return argv, {**env, **_display_env()}
    from atlas.sandbox.proxy import proxy_for

    await asyncio.to_thread(probe)  # the first probe starts bwrap a few times: off the loop
    socket = None
    if shutil.which("socat") is None:  # it bridges the proxy into the sandbox
        log.warning("sandbox: socat is not installed; the browser reaches no page at all")
    else:
        proxy = await proxy_for(run.home)
        socket = await exits.enter_async_context(proxy.channel(_public_web))
    policy = policy_for(run.home, run.bot, proxy_socket=socket)
    try:  # the browser's own folders shown read-only: one found outside /usr starts too
        shown = sandbox_folders(Path(config["chrome"]), policy.hidden)
    except BrowserNotFound as exc:
        raise ToolError(str(exc)) from None
    policy = dataclasses.replace(
        policy,
        readable=(*policy.readable, *shown),
        writable=(*policy.writable, browser_folder(run)),
        env={**policy.env, "BH_AGENT_WORKSPACE": str(workspace)},
        cwd=workspace,
    )
    return sandbox_argv(argv, policy), env


def _display_env() -> dict[str, str]:
    names = ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR")
    return {name: os.environ[name] for name in names if name in os.environ}


async def _start_worker(run: RunContext, mode: Mode) -> _Worker:
    from atlas.sandbox.policy import sandbox_enabled

    sandboxed = sandbox_enabled(run.home)
    config, workspace, log_path = _worker_config(run, mode, sandboxed)
    exits = contextlib.AsyncExitStack()
    try:
        argv, env = await _launch(run, config, workspace, exits)
        with log_path.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                cwd=workspace,
                env=env,
                start_new_session=True,  # its own process group: a stuck worker is killed whole
                limit=64 * 2**20,  # a reply is one JSON line, output included
            )
    except BaseException:
        await exits.aclose()
        raise
    worker = _Worker(process, mode, log_path, exits)
    try:
        async with asyncio.timeout(START_TIMEOUT):
            hello = await worker.receive()
    except (TimeoutError, ToolError):
        await _kill(worker)
        raise ToolError(
            f"the browser did not start within {START_TIMEOUT:g} s; see {log_path}"
        ) from None
    if "fatal" in hello:
        await _kill(worker)
        raise ToolError(f"the browser could not start: {hello['fatal']} (log: {log_path})")
    return worker


async def _worker_for(run: RunContext, mode: Mode) -> _Worker:
    key = (run.home.root, run.bot.name)
    async with _start_locks.setdefault(key, asyncio.Lock()):
        worker = _workers.get(key)
        if worker is not None and worker.alive and worker.mode == mode:
            return worker
        if worker is not None:
            _workers.pop(key, None)
            async with worker.lock:  # a call still running in the old browser finishes first
                await _close(worker)  # another mode means another browser
        worker = await _start_worker(run, mode)
        _workers[key] = worker
        return worker


async def _kill(worker: _Worker) -> None:
    """SIGTERM the worker's group (Playwright closes its Chromium on it), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, CLOSE_GRACE / 2), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.process.pid, sig)
        if grace is None:
            break
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await worker.process.wait()
                break
    await worker.process.wait()
    await worker.exits.aclose()


async def _close(worker: _Worker) -> None:
    """Ask the worker to close its browser and end; kill it if it does not."""
    if not worker.alive:
        await worker.exits.aclose()
        return
    with contextlib.suppress(ConnectionError):
        worker.send({"op": "close"})
        assert worker.process.stdin is not None
        worker.process.stdin.close()
    try:
        async with asyncio.timeout(CLOSE_GRACE):
            await worker.process.wait()
    except TimeoutError:
        await _kill(worker)
    await worker.exits.aclose()


async def close_browsers(home: Home | None = None) -> None:
    """Close the browser workers of one home (or of every home); the runtime calls it at close."""
    keys = [key for key in _workers if home is None or key[0] == home.root]
    workers = [_workers.pop(key) for key in keys]
    await asyncio.gather(*(_close(w) for w in workers))


async def _call(worker: _Worker, code: str, timeout_s: int) -> dict[str, Any]:
    async with worker.lock:
        worker.next_id += 1
        call_id = worker.next_id
        worker.send({"op": "run", "id": call_id, "code": code, "timeout_s": timeout_s})
        try:
            async with asyncio.timeout(timeout_s + REPLY_GRACE):
                while True:
                    reply = await worker.receive()
                    if reply.get("id") == call_id:
                        return reply
                    worker.abandoned.discard(reply.get("id", -1))
        except TimeoutError:
            await _kill(worker)  # the worker itself is stuck: only a restart helps
            raise ToolError(
                f"the call did not stop after {timeout_s} s; the browser was restarted"
            ) from None
        except asyncio.CancelledError:
            with contextlib.suppress(ConnectionError):
                worker.send({"op": "cancel", "id": call_id})
            worker.abandoned.add(call_id)
            raise


def _screenshots(output: str) -> list[Image]:
    images: list[Image] = []
    seen: set[Path] = set()
    for match in _SHOT_PATH.finditer(output):
        path = Path(match.group(1))
        if path in seen or not path.is_file() or path.stat().st_size > MAX_IMAGE_BYTES:
            continue
        seen.add(path)
        data = base64.b64encode(path.read_bytes()).decode()
        images.append(Image(IMAGE_TYPES[path.suffix.lower()], data))
    return images


@tool(deferred=True, failure_tolerant=True, untrusted=True, available=chrome_missing)
async def browser_exec(
    run: RunContext,
    code: Annotated[str, Field(description="Python; print() what you want to see")],
    mode: Annotated[
        Mode, Field(description="profile: logins kept; clean: fresh profile; headless")
    ] = "profile",
    timeout_s: Annotated[int, Field(ge=1, le=1800)] = 300,
) -> ToolResult:
    """Drive a real Chromium with Python, in a worker that keeps the browser, tabs and files
    ($BH_AGENT_WORKSPACE) across calls; variables do not last. Helpers: new_tab(url=None),
    goto_url(url), wait_for_load(), page_info(), js(expression, arg=None), fill_input(selector,
    text), click_at_xy(x, y), capture_screenshot(path=None) (its path is printed and the image
    shown to you), cdp(method, params=None), ensure_real_tab(). The last expression's value is
    printed. At a login, CAPTCHA or payment, stop and ask the user."""
    worker = await _worker_for(run, mode)
    reply = await _call(worker, code, timeout_s)
    if reply.get("stuck"):
        _workers.pop((run.home.root, run.bot.name), None)
        await _close(worker)  # its next call starts a fresh worker
    output = reply.get("output") or ""
    error = reply.get("error")
    text = output.rstrip("\n") or "(no output)"
    if error:
        text = f"{text}\n{error}" if output else error
    images = await asyncio.to_thread(_screenshots, output) if run.supports_images else []
    return ToolResult(text, images=images, is_error=bool(error) and not output)


BROWSER_TOOLS: list[Tool] = [browser_exec]
