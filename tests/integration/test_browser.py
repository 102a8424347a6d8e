"""browser_exec in the system Chromium against a form served by aiohttp on 127.0.0.1 (which the
home's `[web] allow_private` lets the browser reach, as a person would allow a local site)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from atlas.home import Home
from atlas.tools import browser
from atlas.tools.browser import browser_exec, close_browsers
from atlas.tools.registry import RunContext
from tests.helpers import BASE_CONFIG, make_home, run_context

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")

FORM = """<!doctype html><html><head><title>Sign the guestbook</title></head><body>
<input id="name" placeholder="Your name">
<button id="send" style="position:absolute; left:40px; top:80px; width:120px; height:40px">Send</button>
<p id="greeting"></p>
<script>
document.querySelector('#send').addEventListener('click', async () => {
  const body = new URLSearchParams({name: document.querySelector('#name').value});
  const answer = await fetch('/submit', {method: 'POST', body});
  document.querySelector('#greeting').textContent = await answer.text();
});
</script></body></html>"""

FILL_AND_SUBMIT = """
goto_url(URL)
fill_input("#name", "Ada")
box = js("(() => { const r = document.querySelector('#send').getBoundingClientRect();"
         " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
click_at_xy(*box)
import time
for _ in range(100):
    greeting = js("document.querySelector('#greeting').textContent")
    if greeting:
        break
    time.sleep(0.05)
print("greeting:", greeting)
capture_screenshot()
page_info()["title"]
"""


@pytest.fixture
async def form_site() -> AsyncIterator[tuple[str, list[str]]]:
    names: list[str] = []

    async def form(request: web.Request) -> web.Response:
        return web.Response(text=FORM, content_type="text/html")

    async def submit(request: web.Request) -> web.Response:
        names.append((await request.post())["name"])  # type: ignore[arg-type]
        return web.Response(text=f"Hello, {names[-1]}!")

    app = web.Application()
    app.router.add_get("/form", form)
    app.router.add_post("/submit", submit)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/form", names
    await runner.cleanup()


LOCAL_SITES = '\n[web]\nallow_private = ["127.0.0.1"]\n'


@pytest.fixture
def home(home_path: Path) -> Home:
    return make_home(
        home_path, config=BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + LOCAL_SITES
    )


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    yield run_context(home)
    await close_browsers(home)


async def test_fill_click_read_and_screenshot(
    run: RunContext, form_site: tuple[str, list[str]]
) -> None:
    url, names = form_site
    code = f"URL = {url!r}\n{FILL_AND_SUBMIT}"
    result = await browser_exec.invoke(run, {"code": code})
    assert not result.is_error, result.text
    assert "greeting: Hello, Ada!" in result.text
    assert result.text.rstrip().endswith("'Sign the guestbook'")  # the last expression's value
    assert names == ["Ada"]
    shot = Path(result.text.split("screenshot: ", 1)[1].split()[0])
    assert shot.is_relative_to(run.bot.workspace / "browser")
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert len(result.images) == 1 and result.images[0].media_type == "image/png"
    assert base64.b64decode(result.images[0].data_b64) == shot.read_bytes()

    # The browser and its tab last across calls; Python variables and helpers' state do not.
    again = await browser_exec.invoke(
        run,
        {
            "code": "import os\nprint(page_info()['url'], os.environ['BH_AGENT_WORKSPACE'])\n"
            "print('box' in globals())"
        },
    )
    assert again.text.splitlines() == [f"{url} {run.bot.workspace / 'browser'}", "False"]

    # A runaway call is stopped; the browser (and the page in it) stays.
    runaway = await browser_exec.invoke(
        run, {"code": "print('spinning')\nwhile True: pass", "timeout_s": 1}
    )
    assert "spinning" in runaway.text and "stopped: timed out after 1 s" in runaway.text
    # A cancelled turn (/stop) stops the call the same way.
    spinning = asyncio.create_task(browser_exec.invoke(run, {"code": "while True: pass"}))
    await asyncio.sleep(0.3)
    spinning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await spinning
    after = await browser_exec.invoke(run, {"code": "page_info()['url']"})
    assert after.text == repr(url)


async def test_errors_come_back_as_tracebacks_of_the_code(run: RunContext) -> None:
    result = await browser_exec.invoke(run, {"code": "x = 1\nraise ValueError('bad idea')"})
    assert result.is_error
    assert 'File "<browser_exec>", line 2' in result.text
    assert "ValueError: bad idea" in result.text
    assert "browser_worker.py" not in result.text


async def test_a_model_that_cannot_see_images_gets_the_path_only(
    run: RunContext, form_site: tuple[str, list[str]]
) -> None:
    run.supports_images = False
    result = await browser_exec.invoke(
        run, {"code": f"goto_url({form_site[0]!r})\ncapture_screenshot('shots/a.png')"}
    )
    assert f"screenshot: {run.bot.workspace / 'browser' / 'shots' / 'a.png'}" in result.text
    assert result.images == []


async def test_close_browsers_ends_the_worker(run: RunContext) -> None:
    result = await browser_exec.invoke(run, {"code": "1 + 1", "mode": "headless"})
    assert result.text == "2", result.text
    worker = browser._workers[(run.home.root, run.bot.name)]
    assert worker.mode == "headless" and worker.alive
    await close_browsers(run.home)
    assert not worker.alive and worker.process.returncode == 0
    assert (run.home.root, run.bot.name) not in browser._workers


async def test_unavailable_without_chromium(home_path: Path) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    home = make_home(home_path, config=config + '\n[browser]\nchrome = "/nonexistent/chromium"\n')
    result = await browser_exec.invoke(run_context(home), {"code": "1"})
    assert result.is_error and '[browser] chrome = "/nonexistent/chromium"' in result.text


def test_flags() -> None:
    assert browser_exec.deferred and browser_exec.untrusted and browser_exec.failure_tolerant
    assert not browser_exec.read_only
