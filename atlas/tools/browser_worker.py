"""The browser worker: a separate process that owns one Playwright Chromium and runs the Python
of browser_exec calls against it, one call at a time.

    python -m atlas.tools.browser_worker '<json config>'

Protocol, JSON lines: stdin takes {"op": "run", "id", "code", "timeout_s"}, {"op": "cancel",
"id"} and {"op": "close"}; the original stdout carries {"ready": true} (or {"fatal": reason})
once the browser is up, then one {"id", "output", "error", "stopped"} per call. The call's code
runs in a thread of its own with print() captured, while Playwright's event loop stays here, so
a runaway call can be stopped without losing the browser.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import ctypes
import io
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atlas.tools.browser_fence import PageFence

CHROMIUM_FLAGS = [
    "--no-sandbox",  # Chromium's own sandbox cannot nest in bubblewrap's; bubblewrap contains it
    "--disable-dev-shm-usage",  # shared memory files go to the private /tmp
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ACTION_TIMEOUT_MS = 30_000
MAX_OUTPUT_CHARS = 1_000_000
STOP_GRACE = 3.0  # seconds a stopped call's thread gets to unwind before the worker gives up
CODE_NAME = "<browser_exec>"


class CallStopped(BaseException):
    """Raised inside a call's thread when it runs out of time or is cancelled (BaseException,
    so the model's own `except Exception` cannot swallow it)."""


class Browser:
    """The Playwright browser, its context and the current tab."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.workspace = Path(config["workspace"])
        # Behind the egress proxy there is no DNS here: the proxy checks names, we check literals.
        self.fence = PageFence(config.get("allow_private", []), resolve=not config.get("proxy"))
        self._playwright: Any = None
        self._browser: Any = None
        self.context: Any = None
        self.page: Any = None

    async def start(self) -> None:
        from playwright.async_api import async_playwright

        self._playwright = await async_playwright().start()
        options = {
            "executable_path": self.config["chrome"],
            "headless": self.config["headless"],
            "args": [*CHROMIUM_FLAGS, *self.config.get("extra_args", [])],
            "chromium_sandbox": False,
        }
        if self.config.get("proxy"):  # every page goes through the egress proxy, loopback too
            options["proxy"] = {"server": self.config["proxy"]}
        context_options = {"service_workers": "block"}  # their requests would escape routing
        chromium = self._playwright.chromium
        if self.config["mode"] == "profile":  # logins and cookies kept in the home
            self.context = await chromium.launch_persistent_context(
                self.config["profile_dir"], **options, **context_options
            )
        else:
            self._browser = await chromium.launch(**options)
            self.context = await self._browser.new_context(**context_options)
        self.context.set_default_timeout(ACTION_TIMEOUT_MS)
        await self.fence.install(self.context)

    async def close(self) -> None:
        if self.context is not None:
            await self.context.close()
        if self._browser is not None:
            await self._browser.close()
        if self._playwright is not None:
            await self._playwright.stop()

    # ---- the helpers' bodies, run on the event loop ---------------------------------------

    async def ensure_real_tab(self) -> dict[str, Any]:
        """Make the current tab an open, ordinary page (not chrome:// or devtools://)."""
        if self.page is None or self.page.is_closed() or _internal(self.page.url):
            candidates = [p for p in self.context.pages if not p.is_closed()]
            real = [p for p in candidates if not _internal(p.url)]
            self.page = real[-1] if real else await self.context.new_page()
        return await self.page_info()

    async def new_tab(self, url: str | None = None) -> dict[str, Any]:
        if url:
            await self.fence.check(url)
        self.page = await self.context.new_page()
        if url:
            await self.page.goto(url, wait_until="load")
        return await self.page_info()

    async def goto_url(self, url: str) -> dict[str, Any]:
        await self.fence.check(url)
        await self.ensure_real_tab()
        await self.page.goto(url, wait_until="load")
        return await self.page_info()

    async def wait_for_load(self, state: str = "load", timeout_s: float = 30) -> dict[str, Any]:
        await self.ensure_real_tab()
        await self.page.wait_for_load_state(state, timeout=timeout_s * 1000)
        return await self.page_info()

    async def page_info(self) -> dict[str, Any]:
        if self.page is None or self.page.is_closed():  # adopt an open tab, but make none
            real = [p for p in self.context.pages if not p.is_closed() and not _internal(p.url)]
            self.page = real[-1] if real else None
        if self.page is None:
            return {"url": None, "title": None, "tabs": len(self.context.pages)}
        pages = self.context.pages
        return {
            "url": self.page.url,
            "title": await self.page.title(),
            "tab": pages.index(self.page) if self.page in pages else None,
            "tabs": len(pages),
            "viewport": self.page.viewport_size,
        }

    async def js(self, expression: str, arg: Any = None) -> Any:
        await self.ensure_real_tab()
        return await self.page.evaluate(expression, arg)

    async def fill_input(self, selector: str, text: str) -> None:
        await self.ensure_real_tab()
        await self.page.fill(selector, text)

    async def click_at_xy(self, x: float, y: float, button: str = "left", clicks: int = 1) -> None:
        await self.ensure_real_tab()
        await self.page.mouse.click(x, y, button=button, click_count=clicks)

    async def capture_screenshot(self, path: str | None = None, full_page: bool = False) -> str:
        await self.ensure_real_tab()
        target = _screenshot_target(self.workspace, path)
        await self.page.screenshot(path=str(target), full_page=full_page)
        return str(target)

    async def cdp(self, method: str, params: dict[str, Any] | None = None) -> Any:
        await self.ensure_real_tab()
        session = await self.context.new_cdp_session(self.page)
        try:
            return await session.send(method, params or {})
        finally:
            await session.detach()


def _screenshot_target(workspace: Path, path: str | None) -> Path:
    """Where a screenshot goes: the given path (relative to the workspace), or a new name."""
    if path is None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
        target = workspace / "screenshots" / f"shot-{stamp}.png"
    else:
        target = workspace / Path(path).expanduser()  # an absolute path stays as it is
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _internal(url: str) -> bool:
    return url.startswith(("chrome://", "devtools://", "chrome-extension://"))


class Call:
    """One browser_exec call: its code runs in a thread; helpers hop onto the event loop."""

    def __init__(self, call_id: int, browser: Browser, loop: asyncio.AbstractEventLoop) -> None:
        self.id = call_id
        self.browser = browser
        self.loop = loop
        self.output = io.StringIO()
        self.stopped: str | None = None  # why the call was stopped, once it is
        self.pending: concurrent.futures.Future[Any] | None = None
        self.thread: threading.Thread | None = None

    def _on_loop(self, make: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Run a Browser coroutine on the event loop and wait for it (from the call's thread)."""
        if self.stopped:
            raise CallStopped(self.stopped)
        self.pending = asyncio.run_coroutine_threadsafe(make(*args), self.loop)
        try:
            return self.pending.result()
        except concurrent.futures.CancelledError:
            raise CallStopped(self.stopped or "cancelled") from None
        finally:
            self.pending = None

    def helpers(self) -> dict[str, Any]:
        b = self.browser

        def capture_screenshot(path: str | None = None, full_page: bool = False) -> str:
            shot = self._on_loop(b.capture_screenshot, path, full_page)
            print(f"screenshot: {shot}")  # a printed path brings the image to the model
            return shot

        return {
            "new_tab": lambda url=None: self._on_loop(b.new_tab, url),
            "goto_url": lambda url: self._on_loop(b.goto_url, url),
            "wait_for_load": lambda state="load", timeout_s=30: self._on_loop(
                b.wait_for_load, state, timeout_s
            ),
            "page_info": lambda: self._on_loop(b.page_info),
            "js": lambda expression, arg=None: self._on_loop(b.js, expression, arg),
            "fill_input": lambda selector, text: self._on_loop(b.fill_input, selector, text),
            "click_at_xy": lambda x, y, button="left", clicks=1: self._on_loop(
                b.click_at_xy, x, y, button, clicks
            ),
            "capture_screenshot": capture_screenshot,
            "cdp": lambda method, params=None: self._on_loop(b.cdp, method, params),
            "ensure_real_tab": lambda: self._on_loop(b.ensure_real_tab),
            "WORKSPACE": str(b.workspace),
        }

    def execute(self, code: str) -> str | None:
        """Run the code (in the call's thread); the error text, or None when it ran through."""
        namespace = {"__name__": "__browser_exec__", **self.helpers()}
        try:
            tree = ast.parse(code, CODE_NAME)
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):  # like a REPL: the last expression's value is shown
                tree.body.pop()
                exec(compile(tree, CODE_NAME, "exec"), namespace)
                value = eval(compile(ast.Expression(last.value), CODE_NAME, "eval"), namespace)
                if value is not None:
                    print(repr(value))
            else:
                exec(compile(tree, CODE_NAME, "exec"), namespace)
        except CallStopped as stop:  # raised bare when injected into the thread: say why
            return f"stopped: {self.stopped or stop}"
        except BaseException as exc:  # the model's code may raise anything; it reads the trace
            return _user_traceback(exc)
        return None

    def stop(self, reason: str) -> None:
        """Stop the call: cancel the helper it waits on, or raise inside its Python code."""
        if self.stopped:
            return
        self.stopped = reason
        if self.pending is not None:
            self.pending.cancel()
        if self.thread is not None and self.thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread.ident), ctypes.py_object(CallStopped)
            )


_real_sleep = time.sleep


def _sliced_sleep(seconds: float) -> None:
    """time.sleep in short slices, so a stopped call's thread meets its CallStopped soon."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        _real_sleep(min(left, 0.05))


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the model's own code down, without the worker's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CODE_NAME:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
    return "".join(lines).rstrip()


class _Capture(io.TextIOBase):
    """sys.stdout and sys.stderr during a call: everything goes to the call's output."""

    def __init__(self) -> None:
        self.call: Call | None = None

    def write(self, text: str) -> int:
        if self.call is not None and self.call.output.tell() < MAX_OUTPUT_CHARS:
            self.call.output.write(text)
        return len(text)


class Worker:
    def __init__(self, config: dict[str, Any], protocol: io.TextIOBase) -> None:
        self.browser = Browser(config)
        self.protocol = protocol
        self.capture = _Capture()
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.current: Call | None = None

    def send(self, message: dict[str, Any]) -> None:
        self.protocol.write(json.dumps(message, default=str) + "\n")
        self.protocol.flush()

    async def run_calls(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            message = await self.queue.get()
            call = Call(message["id"], self.browser, loop)
            self.current = call
            reply = await self._run(call, message["code"], float(message["timeout_s"]))
            self.current = None
            self.send(reply)
            if reply.get("stuck"):
                return  # a thread we cannot stop still runs: end, and be started again

    async def _run(self, call: Call, code: str, timeout_s: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str | None] = loop.create_future()

        def target() -> None:
            error = call.execute(code)
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(error))

        self.capture.call = call
        real_stderr, sys.stderr = sys.stderr, self.capture  # type: ignore[assignment]
        call.thread = threading.Thread(target=target, name=f"call-{call.id}", daemon=True)
        call.thread.start()
        try:
            error = await asyncio.wait_for(asyncio.shield(done), timeout_s)
        except TimeoutError:
            call.stop(f"timed out after {timeout_s:g} s")
            try:
                error = await asyncio.wait_for(asyncio.shield(done), STOP_GRACE)
            except TimeoutError:
                error = f"stopped: {call.stopped}"
        # `done` is set just before the thread returns: give it a moment to really end.
        await asyncio.to_thread(call.thread.join, 1.0)
        stuck = call.thread.is_alive()
        self.capture.call = None
        sys.stderr = real_stderr
        output = call.output.getvalue()
        if len(output) >= MAX_OUTPUT_CHARS:
            output += f"\n[output cut at {MAX_OUTPUT_CHARS:,} characters]"
        return {"id": call.id, "output": output, "error": error, "stuck": stuck}

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 2**20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        runner = asyncio.create_task(self.run_calls())
        try:
            while not runner.done():
                reading = asyncio.ensure_future(reader.readline())
                await asyncio.wait({reading, runner}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    reading.cancel()
                    break  # the runner ended (a stuck call)
                line = reading.result()
                if not line:
                    break  # the parent is gone: close the browser and end
                message = json.loads(line)
                if message["op"] == "run":
                    self.queue.put_nowait(message)
                elif message["op"] == "cancel":
                    if self.current is not None and self.current.id == message["id"]:
                        self.current.stop("cancelled")
                elif message["op"] == "close":
                    break
        finally:
            runner.cancel()
            if self.current is not None:
                self.current.stop("the worker is closing")


async def main(config: dict[str, Any]) -> int:
    # The protocol keeps the real stdout; anything else printing to fd 1 lands in stderr (the log).
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    time.sleep = _sliced_sleep  # the model's time.sleep(...) must not outlast a stop
    worker = Worker(config, protocol)
    sys.stdout = worker.capture  # type: ignore[assignment]
    try:
        await worker.browser.start()
    except Exception as exc:  # a missing or broken Chromium: the parent shows the reason
        worker.send({"fatal": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"})
        return 1
    worker.send({"ready": True})
    try:
        await worker.serve()
    finally:
        await worker.browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(json.loads(sys.argv[1]))))
