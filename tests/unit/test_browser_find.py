"""The browser is found, not assumed (issue 21 item 7): Chrome, Edge or Chromium on PATH, then in
each platform's usual places; `[browser] chrome` overrides, and one that is not there is an
error naming the key. Fake executables in temporary folders, a temporary PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.tools import browser as browser_module
from atlas.tools import browser_find
from atlas.tools.browser_find import BrowserNotFound, find_browser, sandbox_folders
from atlas.tools.catalog import default_registry
from tests.helpers import BASE_CONFIG, make_home, run_context

BARE = {"PATH": "", "HOME": "/nonexistent"}


def fake_browser(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_found_on_path_in_the_order_of_the_names(tmp_path: Path) -> None:
    edge = fake_browser(tmp_path / "a" / "microsoft-edge")
    chrome = fake_browser(tmp_path / "b" / "google-chrome-stable")
    path = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    found = find_browser("", environ={"PATH": path}, platform="darwin")
    assert found.path == chrome and found.found_by == "PATH (google-chrome-stable)"
    assert found.kind == "Google Chrome"  # Chrome is looked for before Edge, wherever it is
    chrome.unlink()
    found = find_browser("", environ={"PATH": path}, platform="darwin")
    assert (found.path, found.kind) == (edge, "Microsoft Edge")
    assert found.describe() == f"Microsoft Edge at {edge} (PATH (microsoft-edge))"


def test_a_file_that_is_not_executable_is_not_a_browser(tmp_path: Path) -> None:
    (tmp_path / "chromium").write_text("not a program")
    with pytest.raises(BrowserNotFound, match="no Chrome, Edge or Chromium on PATH"):
        find_browser("", environ={"PATH": str(tmp_path), "HOME": "/nonexistent"}, platform="darwin")


def test_the_usual_places_of_macos_and_windows(tmp_path: Path) -> None:
    app = "Chromium.app/Contents/MacOS/Chromium"
    chromium = fake_browser(tmp_path / "Applications" / app)  # ~/Applications
    found = find_browser("", environ={"PATH": "", "HOME": str(tmp_path)}, platform="darwin")
    assert (found.path, found.found_by, found.kind) == (chromium, "the usual place", "Chromium")
    program_files = tmp_path / "Program Files"
    edge = fake_browser(program_files / "Microsoft" / "Edge" / "Application" / "msedge.exe")
    windows = {"PATH": "", "PROGRAMFILES": str(program_files)}
    found = find_browser("", environ=windows, platform="win32")
    assert (found.path, found.kind) == (edge, "Microsoft Edge")


def test_the_usual_places_of_linux() -> None:
    places = [str(p) for p in browser_find.usual_places("linux", {})]
    for place in ("/usr/bin/chromium", "/opt/google/chrome/chrome", "/opt/microsoft/msedge/msedge"):
        assert place in places
    assert places[-1] == "/snap/bin/chromium"  # a snap cannot start in the sandbox: last


def test_the_setting_overrides_and_a_wrong_one_names_the_key(tmp_path: Path) -> None:
    on_path = fake_browser(tmp_path / "bin" / "chromium")
    mine = fake_browser(tmp_path / "mine" / "chrome-dev")
    environ = {"PATH": str(tmp_path / "bin")}
    found = find_browser(str(mine), "/h/config.toml", environ=environ, platform="linux")
    assert (found.path, found.found_by) == (mine, "[browser] chrome")
    by_name = find_browser("chromium", environ=environ, platform="linux")  # a command name
    assert (by_name.path, by_name.found_by) == (on_path, "[browser] chrome")
    with pytest.raises(BrowserNotFound) as missing:
        find_browser("/nowhere/chrome", "/h/config.toml", environ=environ, platform="linux")
    assert str(missing.value).startswith(
        '[browser] chrome = "/nowhere/chrome" in /h/config.toml: no such file'
    )  # not silently replaced by the Chromium on PATH
    (tmp_path / "plain").write_text("")
    with pytest.raises(BrowserNotFound, match="not an executable file"):
        find_browser(str(tmp_path / "plain"), environ=environ, platform="linux")


def test_the_old_default_where_nothing_is_means_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Homes made before this change say chrome = "/usr/bin/chromium" (atlas init wrote it)."""
    monkeypatch.setattr(browser_find, "OLD_DEFAULT", str(tmp_path / "old" / "chromium"))
    edge = fake_browser(tmp_path / "bin" / "msedge")
    found = find_browser(
        str(tmp_path / "old" / "chromium"),
        environ={"PATH": str(tmp_path / "bin")},
        platform="linux",
    )
    assert found.path == edge


def test_the_sandbox_shows_the_browsers_folders(tmp_path: Path) -> None:
    install = fake_browser(tmp_path / "opt" / "chrome" / "chrome")
    link = tmp_path / "bin" / "google-chrome"
    link.parent.mkdir()
    link.symlink_to(install)
    assert sandbox_folders(link, ()) == (tmp_path / "bin", tmp_path / "opt" / "chrome")
    with pytest.raises(BrowserNotFound, match="which the sandbox hides"):
        sandbox_folders(link, (tmp_path / "opt",))


async def test_browser_exec_is_offered_with_a_browser_found_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No [browser] chrome: a browser on PATH makes browser_exec available, and the worker is
    started with that browser; none anywhere, and the reason says where Atlas looked."""
    home = make_home(tmp_path / "home")
    run = run_context(home)
    registry = default_registry()
    tool = registry.get("browser_exec")
    assert tool is not None
    edge = fake_browser(tmp_path / "bin" / "msedge")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert tool.unavailable_reason(run) is None
    config, _, _ = browser_module._worker_config(run, "headless", sandboxed=True)
    assert config["chrome"] == str(edge)
    monkeypatch.setattr(browser_find, "LINUX_PLACES", ())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    reason = tool.unavailable_reason(run)
    assert reason and "no Chrome, Edge or Chromium on PATH" in reason
    result = await registry.call(run, "browser_exec", '{"code": "1"}')
    assert result.is_error and "no Chrome, Edge or Chromium" in result.text


def test_a_wrong_setting_makes_browser_exec_unavailable_naming_the_key(tmp_path: Path) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    home = make_home(tmp_path / "home", config=config + '\n[browser]\nchrome = "/nowhere"\n')
    reason = default_registry().get("browser_exec").unavailable_reason(run_context(home))  # type: ignore[union-attr]
    assert reason and '[browser] chrome = "/nowhere"' in reason and str(home.config_path) in reason


def test_none_found_is_kept_for_the_minute_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """browser_exec's availability is asked every model round: "none found" is not searched
    for again each time, and still names where Atlas looked."""
    browser_find._find_cached.cache_clear()
    monkeypatch.setattr(browser_find, "LINUX_PLACES", ())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    searches: list[str] = []
    real = browser_find._find
    monkeypatch.setattr(browser_find, "_find", lambda *a: searches.append("x") or real(*a))
    for _ in range(3):
        with pytest.raises(BrowserNotFound, match="no Chrome, Edge or Chromium on PATH"):
            find_browser("", tmp_path / "config.toml")
    assert searches == ["x"]
    browser_find._find_cached.cache_clear()
