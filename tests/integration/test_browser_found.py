"""A browser found on PATH outside /usr starts inside the sandbox (issue 21 item 7): here a link
on PATH into a folder under /tmp, which the sandbox replaces with its own /tmp (a PATH folder
is shown already, the folder the link leads to only because the browser's folders are)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from atlas.tools.browser import browser_exec, close_browsers
from tests.helpers import BASE_CONFIG, make_home, run_context

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
]


async def test_a_browser_on_path_under_tmp_starts_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = tmp_path / "opt" / "chrome"  # as Chrome's .deb: a link on PATH into its folder
    install.mkdir(parents=True)
    wrapper = install / "chrome"  # marks its pages, to tell it from /usr/bin/chromium
    wrapper.write_text(f'#!/bin/sh\nexec {CHROMIUM} --user-agent=FoundOnPath "$@"\n')
    wrapper.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "google-chrome").symlink_to(wrapper)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    from atlas.tools import browser_find

    monkeypatch.setattr(browser_find, "PATH_NAMES", ("google-chrome",))
    home = make_home(tmp_path / "home", config=BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1"))
    run = run_context(home)
    try:
        result = await browser_exec.invoke(
            run, {"code": "print(js('navigator.userAgent'))", "mode": "headless"}
        )
    finally:
        await close_browsers(home)
    assert not result.is_error, result.text
    assert "FoundOnPath" in result.text
