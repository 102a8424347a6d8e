"""atlas/mcp/launchers.py: which commands are launchers, which registry each installs from, and
which paths the sandbox does not show."""

from __future__ import annotations

from pathlib import Path

from atlas.mcp.launchers import NPX, PIPX, UVX, launcher_of, missing_program, unseen_path


def test_launchers_are_known_by_their_program_and_subcommand() -> None:
    assert launcher_of("npx", ["-y", "pkg"]) is NPX
    assert launcher_of("/usr/local/bin/npx", []) is NPX
    assert launcher_of("npm", ["exec", "pkg"]) is NPX
    assert launcher_of("uvx", ["pkg"]) is UVX
    assert launcher_of("uv", ["tool", "run", "pkg"]) is UVX
    assert launcher_of("pipx", ["run", "pkg"]) is PIPX
    assert launcher_of("npm", ["install"]) is None
    assert launcher_of("pipx", ["install", "pkg"]) is None
    assert launcher_of("sh", ["-c", "npx -y pkg"]) is None


def test_the_registry_is_the_one_the_environment_names_else_the_public_one() -> None:
    assert NPX.registry_hosts({}) == ("registry.npmjs.org",)
    assert NPX.registry_hosts({"npm_config_registry": "https://npm.corp.example/"}) == (
        "npm.corp.example",
    )
    assert UVX.registry_hosts({}) == ("pypi.org", "files.pythonhosted.org")
    assert UVX.registry_hosts({"UV_INDEX_URL": "https://PyPI.Corp.example/simple"}) == (
        "pypi.corp.example",
    )
    assert PIPX.registry_hosts({"PIP_INDEX_URL": "http://10.0.0.5:3141/root/pypi"}) == ("10.0.0.5",)


def test_caches_go_to_the_servers_folder(tmp_path: Path) -> None:
    assert NPX.data_env(tmp_path)["npm_config_cache"] == str(tmp_path / ".npm")
    assert UVX.data_env(tmp_path)["UV_CACHE_DIR"].startswith(str(tmp_path))
    assert PIPX.data_env(tmp_path)["PIPX_HOME"].startswith(str(tmp_path))


def test_a_missing_program_is_named(tmp_path: Path) -> None:
    assert missing_program("npx", str(tmp_path)) is not None
    assert missing_program("sh", "/usr/bin:/bin") is None
    assert "not an executable file" in (missing_program(str(tmp_path / "nope"), None) or "")


def test_paths_the_sandbox_does_not_show(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "home" / "mcp-data" / "x"
    data.mkdir(parents=True)
    assert "under /tmp" in (unseen_path(tmp_path / "s.js", [], [], []) or "")
    assert unseen_path(tmp_path / "s.js", [], [], [tmp_path]) is None  # shown read-only
    assert "which the sandbox hides" in (unseen_path(home / "s.js", [home], [], [tmp_path]) or "")
    assert unseen_path(data / "s.js", [home], [data], []) is None  # its own folder
    assert unseen_path(Path("/usr/bin/env"), [home], [], []) is None
