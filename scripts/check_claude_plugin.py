"""By hand, against a real Claude Code: does it run Atlas's plugin as the tests assume?

    uv run python scripts/check_claude_plugin.py [--claude PATH] [--answer "allow once"|deny]

Starts the bridge over a fresh home and a fake Anthropic API on 127.0.0.1 (tests/fakes), then
an interactive Claude Code session in a pseudo-terminal with the plugin (`--plugin-dir`), in a
throwaway HOME. The fake model asks for one Bash command that creates a file; Claude Code's
permission prompt goes to the hook, the bridge asks a scripted person, and the answer decides
whether the file appears. Prints what the person was asked, the workbench, and the verdict.
Checked with Claude Code 2.1.197: allowed, the file is made; denied, Claude reads the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atlas.channels.base import Address
from atlas.executors.bridge import ExecutorBridge
from atlas.executors.plugin_install import write_plugin
from atlas.executors.workbench import Workbench
from tests.fakes.model_servers import FakeAnthropicServer
from tests.helpers import Person, make_home

KEY = "sk-ant-check-plugin-0000000000"


def seeded_user_home(root: Path, work: Path) -> Path:
    """A HOME where Claude Code starts straight into the session: onboarding done, the folder
    trusted, the test key accepted."""
    home = root / "user"
    home.mkdir()
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "allowedTools": []}},
    }
    (home / ".claude.json").write_text(json.dumps(state))
    return home


def run_in_terminal(argv: list[str], cwd: Path, env: dict[str, str], until: Path) -> None:
    """Run an interactive program in a pseudo-terminal until `until` exists or 60 s pass."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not until.exists() and process.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)  # keep its output flowing
                except OSError:
                    break
        time.sleep(2)  # let the turn end (the Stop hook)
    finally:
        process.terminate()
        process.wait(10)
        os.close(master)


async def check(claude: str, answer: str) -> bool:
    root = Path(tempfile.mkdtemp(prefix="atlas-plugin-", dir="/tmp"))
    try:
        home = make_home(root / "h")
        plugin = write_plugin(home) / "atlas"
        workbench, person = Workbench(), Person(answer)

        async def asker() -> tuple[Person, Address]:
            return person, Address("atlas", "telegram:atlas", "42")

        bridge = ExecutorBridge(home, lambda: workbench, asker, wait_seconds=30)
        await bridge.start()
        work = root / "work"
        work.mkdir()
        proof = work / "proof.txt"
        async with FakeAnthropicServer() as fake:
            fake.count_prompt = lambda body: 100
            fake.reply('{"title": "Proof file"}')  # Claude Code names the session first
            fake.reply(calls=[("Bash", {"command": f"touch {proof}", "description": "proof"})])
            for _ in range(6):
                fake.reply("done")
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(seeded_user_home(root, work)),
                "TERM": "xterm",
                "ANTHROPIC_BASE_URL": fake.base_url,
                "ANTHROPIC_API_KEY": KEY,
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            }
            argv = [claude, "make the proof file", "--plugin-dir", str(plugin)]
            await asyncio.to_thread(run_in_terminal, argv, work, env, proof)
        await bridge.stop()
        print("asked:", *(q for q, _ in person.asked), sep="\n  ")
        for i in workbench.list():
            print(f"workbench: {i.id} {i.owner} {i.state} {i.account} {i.folder} {i.title!r}")
        made = proof.exists()
        print(f"answer {answer!r}: the file was {'made' if made else 'not made'}")
        return bool(person.asked) and made == (answer == "allow once")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claude", default="claude", help="the claude binary")
    parser.add_argument("--answer", default="allow once", choices=["allow once", "deny"])
    args = parser.parse_args()
    if shutil.which(args.claude) is None:
        print(f"{args.claude} not found", file=sys.stderr)
        return 2
    ok = asyncio.run(check(args.claude, args.answer))
    print("OK" if ok else "NOT AS EXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
