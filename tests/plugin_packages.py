"""Install a tiny plugin package into the test's Python environment, as pip would leave it:
its module and a `<name>-<version>.dist-info` with METADATA and entry_points.txt, in a folder
put first on sys.path. importlib.metadata then finds its entry points as it finds Atlas's own
(no mock of the plugin SDK); the folder and the modules leave with the test.

    from tests.plugin_packages import PluginInstaller, plugin_installer  # noqa: F401

    def test_x(plugin_installer: PluginInstaller) -> None:
        plugin_installer(name="tinychan", version="0.1", modules={...}, entry_points={...})
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

PluginInstaller = Callable[..., Path]


def install_plugin_package(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    name: str,
    version: str,
    modules: Mapping[str, str],
    entry_points: Mapping[str, Mapping[str, str]],
) -> Path:
    """`modules`: module name -> source; `entry_points`: group -> {entry name: "module:Class"}.
    The folder the package is installed in (on sys.path until the test ends)."""
    folder.mkdir(parents=True)
    for module, source in modules.items():
        (folder / f"{module}.py").write_text(source)
        monkeypatch.delitem(sys.modules, module, raising=False)  # and removed after the test
    # As a wheel names it: the project name with `-` as `_`, or importlib.metadata would read
    # `atlas-tiny-0.1.dist-info` as a second "atlas" and hide Atlas's own entry points.
    info = folder / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{entry} = {target}" for entry, target in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def plugin_installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginInstaller]:
    from atlas.executors.registry import executor_classes

    installed: list[str] = []

    def install(**package: object) -> Path:
        folder = tmp_path / f"site-packages-{len(installed)}"
        installed.extend(package["modules"])  # type: ignore[arg-type]
        executor_classes.cache_clear()  # loaded once per process: this test adds some
        return install_plugin_package(folder, monkeypatch, **package)  # type: ignore[arg-type]

    yield install
    for module in installed:
        sys.modules.pop(module, None)
    executor_classes.cache_clear()  # the next test sees only what is really installed
