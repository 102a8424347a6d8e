"""`atlas doctor`: a missing optional part (Chromium, socat) is a warning, not a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas import doctor as doctor_module
from atlas.doctor import Check, doctor
from atlas.tools.browser_find import Browser, find_browser
from tests.helpers import BASE_CONFIG, make_home

NO_CHROME = BASE_CONFIG + '\n[browser]\nchrome = "/nonexistent/chromium"\n'


def home_without_chromium(root: Path) -> None:
    make_home(root, config=NO_CHROME.format(base_url="http://127.0.0.1:9/v1"))


def browsers_found(elsewhere: str | None):  # type: ignore[no-untyped-def]
    """The finder on a machine with no browser on PATH nor in the usual places, except
    `elsewhere` (what a search without [browser] chrome finds)."""

    def find(setting: str = "", config_path: Path | str = "config.toml") -> Browser:
        if elsewhere and not setting.strip():
            return Browser(Path(elsewhere), "PATH (chromium-browser)")
        bare = {"PATH": "", "HOME": "/nonexistent"}
        return find_browser(setting, config_path, environ=bare, platform="darwin")

    return find


@pytest.fixture
def nothing_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh machine: no Chromium, no socat; the sandbox itself stands (checked elsewhere)."""
    monkeypatch.setattr(doctor_module, "find_chromium", browsers_found(None))
    real_which = doctor_module.shutil.which
    monkeypatch.setattr(
        doctor_module.shutil,
        "which",
        lambda name, **kw: None if name == "socat" else real_which(name, **kw),
    )
    monkeypatch.setattr(doctor_module, "_sandbox_check", lambda home: Check("sandbox", True, "ok"))


async def test_offline_doctor_exits_0_without_the_optional_parts(
    tmp_path: Path, nothing_optional: None, capsys: pytest.CaptureFixture[str]
) -> None:
    home_without_chromium(tmp_path / "home")
    code = await doctor(tmp_path / "home", offline=True)
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    chromium = next(i for i, line in enumerate(lines) if line.startswith("[warn] browser:"))
    assert "browser_exec" in lines[chromium]  # what it enables
    assert "apt-get install chromium" in lines[chromium + 1]  # how to get it
    socat = next(i for i, line in enumerate(lines) if line.startswith("[warn] socat:"))
    assert "network" in lines[socat]
    assert "apt-get install socat" in lines[socat + 1]
    assert "FAIL" not in out
    assert lines[-1] == "all good (2 warning(s): browser, socat)"


async def test_a_required_failure_still_exits_1(
    tmp_path: Path, nothing_optional: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await doctor(tmp_path / "no-home", offline=True)
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] home and config" in out
    assert "[warn] browser" in out


async def test_chromium_elsewhere_than_config_says_names_the_setting(
    tmp_path: Path,
    nothing_optional: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """browser_exec runs [browser] chrome when it is set: a browser elsewhere does not make it
    work, and the warning names the key."""
    home_without_chromium(tmp_path / "home")
    monkeypatch.setattr(doctor_module, "find_chromium", browsers_found("/usr/bin/chromium-browser"))
    code = await doctor(tmp_path / "home", offline=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert '[warn] browser: [browser] chrome = "/nonexistent/chromium" in ' in out
    assert "no such file" in out
    assert 'set [browser] chrome = "/usr/bin/chromium-browser"' in out


async def test_doctor_names_the_browser_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No [browser] chrome: the browser found on PATH is named, with how it was found."""
    make_home(tmp_path / "home")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    edge = bin_dir / "msedge"
    edge.write_text("#!/bin/sh\n")
    edge.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(doctor_module, "_sandbox_check", lambda home: Check("sandbox", True, "ok"))
    await doctor(tmp_path / "home", offline=True)
    out = capsys.readouterr().out
    assert f"[ok  ] browser: Microsoft Edge at {edge} (PATH (msedge))" in out
