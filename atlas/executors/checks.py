"""`atlas doctor`'s lines for the executors: each one turned on must run (`--version`)."""

from __future__ import annotations

import asyncio
import shutil
from typing import TYPE_CHECKING

from atlas.executors.registry import executor_classes
from atlas.plugins import EXECUTORS_GROUP, why_unavailable

if TYPE_CHECKING:
    from atlas.home import Home

VERSION_SECONDS = 20.0
INSTALL = {
    "claude-code": "`npm install -g @anthropic-ai/claude-code`",
    "codex": "`npm install -g @openai/codex`",
}


async def executor_checks(home: Home) -> list[tuple[str, bool, str, str]]:
    """(name, ok, detail, fix) for every executor config.toml turns on."""
    lines = []
    classes = executor_classes()
    for name, settings in home.settings.executors.items():
        if not settings.enabled:
            continue
        label = f"executor {name}"
        if name not in classes:
            # None installed, or one of another SDK version: say which (versions named).
            why = why_unavailable(EXECUTORS_GROUP, name)
            lines.append((label, False, why, "install (or update) its plugin package"))
            continue
        executor = classes[name](settings, launcher=None)  # type: ignore[arg-type]
        install = INSTALL.get(name, "install it")
        fix = f"{install}, or set binary under [executors.{name}] in config.toml"
        if shutil.which(executor.binary) is None:
            lines.append((label, False, f"{executor.binary}: not found", fix))
            continue
        lines.append((label, *await _version(executor.version_argv()), fix))
    return lines


async def _version(argv: list[str]) -> tuple[bool, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), VERSION_SECONDS)
    except TimeoutError:
        process.kill()
        return False, f"`{' '.join(argv)}` did not answer in {VERSION_SECONDS:.0f} s"
    except OSError as exc:
        return False, f"`{' '.join(argv)}` cannot run: {exc}"
    text = (out or err).decode("utf-8", errors="replace").strip().splitlines()
    first = text[-1] if text else ""
    if process.returncode != 0:
        return False, f"`{' '.join(argv)}` exited {process.returncode}: {first or 'no output'}"
    return True, f"{argv[0]} {first}"
