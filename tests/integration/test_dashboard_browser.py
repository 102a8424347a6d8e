"""The dashboard in real Chromium, one browser for the module: ten tabs share one event stream
and keep working (an approval answered in one, a chat message sent from another), and the
phone layout (390 px) is measured: scroll cues, plot label sizes, contrast in dark mode."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from atlas.channels.base import Address
from atlas.dashboard.auth import issue_login_token
from atlas.providers.scripted import Reply
from tests.dashboard_rig import CHROMIUM, Rig, dashboard_rig, store_conversation
from tests.unit.test_dashboard_chat import chat_rig

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed"),
    pytest.mark.asyncio(loop_scope="module"),
]

TABS = ["/", "/waiting", "/chat/atlas", "/chat/atlas", "/waiting", "/", "/routines"]
TABS += ["/conversations", "/usage", "/trust"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def log_in(context: Any, base: str, home_root: Path) -> Any:
    """A tab of `context` logged in through a one-time link (the cookie serves every tab)."""
    page = await context.new_page()
    await page.goto(f"{base}/login?token={issue_login_token(home_root)}")
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(f"{base}/")
    return page


def watch(page: Any, problems: list[str]) -> None:
    """Console errors (a CSP violation shows there) and uncaught script errors."""
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))


async def until(condition: Any, what: str) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_ten_tabs_share_one_stream_and_an_approval_and_a_chat_still_work(
    browser: Any, home_path: Path
) -> None:
    from playwright.async_api import expect

    async with chat_rig(home_path) as rig:
        base = str(rig.client.make_url("")).rstrip("/")
        context = await browser.new_context()
        problems: list[str] = []
        try:
            first = await log_in(context, base, rig.home.root)
            tabs = [first]
            for path in TABS[1:]:
                tab = await context.new_page()
                watch(tab, problems)
                await tab.goto(base + path)
                tabs.append(tab)
            watch(first, problems)
            await until(lambda: rig.dashboard.events.streams >= 1, "an event stream opened")
            await asyncio.sleep(0.5)  # a tab that opened its own stream would show by now
            assert rig.dashboard.events.streams == 1  # one for the whole browser

            # A turn waits on an approval: every Waiting tab shows it; one answers.
            async def no_answer_from_the_channel() -> str | None:
                await asyncio.Event().wait()
                return None

            where = Address("atlas", "telegram:atlas", "1")
            question = "Run `make deploy`?"
            turn = asyncio.create_task(
                rig.dispatcher.asks.approval(
                    where, 4, question, ["allow once", "deny"], no_answer_from_the_channel
                )
            )
            waiting, other_waiting = tabs[1], tabs[4]
            await expect(other_waiting.get_by_text(question)).to_be_visible()
            await expect(waiting.get_by_text(question)).to_be_visible()
            await waiting.get_by_role("button", name="allow once").click()
            assert await asyncio.wait_for(turn, 10) == "allow once"
            await expect(other_waiting.get_by_text("Nothing is waiting for you.")).to_be_visible()

            # A chat message from one Chat tab: both Chat tabs show it and the answer.
            rig.model.add(Reply("The zeppelin leaves at 14:05 from pier three."))
            rig.model.release.set()
            chat, other_chat = tabs[2], tabs[3]
            await chat.get_by_label("Message to atlas").fill("When does the zeppelin leave?")
            await chat.get_by_role("button", name="Send").click()
            for tab in (chat, other_chat):
                log = tab.locator("#chat-log")
                await expect(log).to_contain_text("When does the zeppelin leave?")
                await expect(log).to_contain_text("leaves at 14:05 from pier three.")
            assert rig.dashboard.events.streams == 1
            assert problems == []
        finally:
            await context.close()


# Per text of an SVG plot: its rendered font size (computed size times the SVG's scale) and
# whether its box lies inside the SVG's (a label cut at the edge is not).
PLOT_LABELS = """() => [...document.querySelectorAll("svg.plot")].flatMap((svg) => {
  const frame = svg.getBoundingClientRect();
  return [...svg.querySelectorAll("text")].map((text) => {
    const box = text.getBoundingClientRect();
    return {
      text: text.textContent,
      px: text.getClientRects().length === 0 ? 0 :  // in the drawing not shown
        parseFloat(getComputedStyle(text).fontSize) * text.getScreenCTM().a,
      inside: box.left >= frame.left - 0.5 && box.right <= frame.right + 0.5 &&
        box.top >= frame.top - 0.5 && box.bottom <= frame.bottom + 0.5,
    };
  });
})"""

# Per visible button: its text colour and the colour behind it (the first opaque background
# up its ancestors), as computed.
BUTTON_COLOURS = """() => [...document.querySelectorAll("button")]
  .filter((b) => b.offsetParent !== null)
  .map((button) => {
    let back = "rgba(0, 0, 0, 0)";
    for (let node = button; node && back.endsWith(", 0)"); node = node.parentElement) {
      back = getComputedStyle(node).backgroundColor;
    }
    return { text: button.textContent.trim(), fg: getComputedStyle(button).color, bg: back };
  })"""


def _luminance(css: str) -> float:
    red, green, blue = (float(v) for v in re.findall(r"[\d.]+", css)[:3])

    def channel(value: float) -> float:
        value /= 255
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(red) + 0.7152 * channel(green) + 0.0722 * channel(blue)


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two computed CSS colours (rgb(…))."""
    light, dark = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


async def _a_home_with_usage_and_decisions(rig: Rig) -> None:
    from atlas.home import Home
    from atlas.store.home_db import GateRecord

    await store_conversation(rig.home)
    with (rig.home.root / "config.toml").open("a") as config:  # ends in [dashboard]
        config.write('prices = { "fake/test-model" = [0.15, 0.6] }\n')  # USD per 1M tokens
    assert rig.dashboard is not None
    rig.home = rig.dashboard.home = Home(rig.home.root)
    command = "rm -rf " + " ".join(f"build/output-{n}.tar.gz" for n in range(12))
    for verdict in ("deny", "allow"):
        await rig.audit.record_decision(
            GateRecord(
                "atlas",
                1,
                "conversation",
                "run_command",
                "d",
                command,
                verdict,
                "person",
                "once",
                "asked the person, who answered on the dashboard",
            )
        )


@pytest.mark.parametrize("width", [390, 1280])
async def test_the_layout_on_a_phone_and_a_desktop_in_dark_mode(
    browser: Any, home_path: Path, width: int
) -> None:
    """At 390 px Home's and Trust's tables scroll sideways behind a visible cue; at both
    widths every plot label renders at 10 px or more, inside its plot, and every button's
    text has a contrast of at least 4.5:1 in dark mode."""
    async with dashboard_rig(home_path) as rig:
        await _a_home_with_usage_and_decisions(rig)
        base = str(rig.client.make_url("")).rstrip("/")
        context = await browser.new_context(
            viewport={"width": width, "height": 844}, color_scheme="dark"
        )
        try:
            page = await log_in(context, base, rig.home.root)
            problems: list[str] = []
            watch(page, problems)
            for path in ("/", "/trust"):
                await page.goto(base + path)
                wrap = page.locator(".table-wrap").first
                cue = wrap.locator(".scroll-cue")
                overflows = await wrap.evaluate("(w) => w.scrollWidth > w.clientWidth + 1")
                if width == 390:
                    assert overflows, f"{path}: the table is squeezed, not scrollable"
                    assert await cue.is_visible(), f"{path}: no cue to scroll"
                else:
                    assert not await cue.is_visible()
                buttons = await page.evaluate(BUTTON_COLOURS)
                assert buttons, path
                for button in buttons:
                    ratio = contrast(button["fg"], button["bg"])
                    assert ratio >= 4.5, f"{path}: button {button} has {ratio:.1f}:1"
            await page.goto(base + "/usage")
            labels = await page.evaluate(PLOT_LABELS)
            shown = [label for label in labels if label["px"] > 0]
            print(f"{width}px: plot labels {min(label['px'] for label in shown):.1f}px at least")
            assert len(shown) >= 6, labels  # both plots' scales and days
            for label in shown:
                assert label["px"] >= 10, f"{label['text']!r} renders {label['px']:.1f} px tall"
                assert label["inside"], f"{label['text']!r} is cut at the plot's edge"
            assert problems == []
        finally:
            await context.close()
