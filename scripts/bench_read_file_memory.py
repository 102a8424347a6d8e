"""Peak memory of read_file on a one-line file (issue 19: 570 MB for 200 MB before the fix).

    uv run python scripts/bench_read_file_memory.py [--mb 200]

Writes a file of `--mb` megabytes holding one line in a temporary home's workspace, then reads
its first page with read_file in a fresh child process and prints the child's peak RSS
(ru_maxrss) and its RSS before the call, so the figure is read_file's and nothing else's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = r"""
import asyncio, json, resource, sys
from pathlib import Path
from atlas.home import Home
from atlas.tools.files import read_file
from atlas.tools.registry import RunContext

home = Home(Path(sys.argv[1]))
run = RunContext(home=home, bot=home.main_bot, conversation_id=1, run_kind="conversation")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = asyncio.run(read_file.invoke(run, {"path": "one-line.txt"}))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_mb": before / 1024, "peak_mb": peak / 1024,
                  "error": result.is_error, "answer_chars": len(result.text)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the one-line file")
    args = parser.parse_args()
    from tests.helpers import make_home

    with tempfile.TemporaryDirectory() as tmp:
        home = make_home(Path(tmp) / "home")
        home.main_bot.workspace.mkdir(parents=True, exist_ok=True)
        with (home.main_bot.workspace / "one-line.txt").open("wb") as f:
            block = b"x" * (1 << 20)
            for _ in range(args.mb):
                f.write(block)
            f.write(b"\n")
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(home.root)],
            capture_output=True,
            text=True,
            check=True,
        )
        figures = json.loads(child.stdout)
        figures["file_mb"] = args.mb
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
