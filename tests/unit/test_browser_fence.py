"""The browser's address fence, without a browser: schemes, address spellings, allow_private."""

from __future__ import annotations

import pytest

from atlas.tools.browser_fence import PageFence, PageRefused


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "FILE:///etc/passwd",
        "view-source:https://example.com/",
        "chrome://version",
        "ftp://example.com/x",
        "javascript:alert(1)",
    ],
)
async def test_schemes_other_than_the_web_are_refused(url: str) -> None:
    reason = await PageFence([], resolve=False).refusal(url)
    assert reason is not None and "http and https only" in reason


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "https://127。0。0。1/",
        "http://１２７.０.０.１/",
        "http://0x7f.1/",
        "http://2130706433/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "ws://10.0.0.5/socket",
        "wss://192.168.1.1/socket",
    ],
)
async def test_private_literals_refused_in_every_spelling(url: str) -> None:
    reason = await PageFence([], resolve=False).refusal(url)
    assert reason is not None and "private, loopback or link-local" in reason


async def test_names_left_to_the_proxy_behind_it_and_resolved_without_it() -> None:
    assert await PageFence([], resolve=False).refusal("http://localhost:8080/") is None
    reason = await PageFence([], resolve=True).refusal("http://localhost:8080/")
    assert reason is not None and "localhost resolves to" in reason


async def test_pages_of_their_own_and_allowed_networks_pass() -> None:
    fence = PageFence(["127.0.0.1"], resolve=False)
    for url in ("data:text/html,<p>x</p>", "blob:https://a.example/1", "about:blank"):
        assert await fence.refusal(url) is None
    assert await fence.refusal("http://127.0.0.1:9/") is None
    assert await fence.refusal("http://127.0.0.2:9/") is not None  # only what is named
    assert await fence.refusal("https://93.184.216.34/") is None  # a public address
    with pytest.raises(PageRefused, match=r"blocked by Atlas: file:///x: file: addresses"):
        await fence.check("file:///x")
