"""Judge a realistic set of developer commands with the gate, and time every judgment.

    uv run python scripts/bench_gate.py [--json] [--rounds 5] [--show]

The commands (about 150: git, python, pytest, uv/pip, npm, cargo, go, make, docker build, ls,
grep, sed -n, find…) run from a bot's workspace in a temporary Atlas home that holds the files
they name (a Makefile, package.json, scripts, a manage.py…), as a bot's would. Each is judged
in the default mode and in auto mode by `atlas.trust.rules.classify`, the function behind
`atlas trust check`. Prints `name: value` lines (or one JSON object): how many are allowed in
auto mode and in the default mode, how many go to the guardian, are asked or are blocked
(with `--show`, which ones), and p50/p99/max judgment time over every command under 1 KB
(the set above plus issue 33's disguised forms), each judged `--rounds` times after a warm-up;
and the same in CPU time of the judging thread (`cpu_*`), which a loaded machine does not move.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.trust.rules import classify

ORDINARY = [
    # git
    "git status", "git status -sb", "git diff", "git diff --stat HEAD~1", "git log --oneline -20",
    "git log -p -- src/app.py", "git show HEAD", "git branch -a", "git checkout -b feature/x",
    "git switch main", "git add -A", "git add src/app.py", "git commit -m 'fix: typo'",
    "git commit --amend --no-edit", "git stash", "git stash pop", "git fetch origin",
    "git pull --rebase", "git rebase -i HEAD~3", "git merge --no-ff feature/x",
    "git tag v1.2.0", "git blame src/app.py", "git grep -n TODO", "git remote -v",
    "git cherry-pick abc123", "git restore --staged src/app.py", "git rev-parse HEAD",
    "git clone https://github.com/psf/requests.git", "git worktree list", "git clean -n",
    # python
    "python --version", "python3 -m venv .venv", "python -m pip install -r requirements.txt",
    "pip install requests", "pip install -e .", "pip list", "pip freeze > requirements.txt",
    "python manage.py migrate", "python manage.py test", "python -m http.server 8000",
    "python scripts/build.py", "python -m json.tool data.json", "uv sync", "uv run pytest -q",
    "uv add httpx", "uv pip install numpy", "poetry install", "poetry run pytest",
    "pytest", "pytest -x -q", "pytest tests/test_app.py::test_home -vv", "pytest -k 'not slow'",
    "pytest --cov=src --cov-report=term-missing", "mypy src", "ruff check .", "ruff format .",
    "black --check .", "isort src", "flake8 src", "tox -e py311", "coverage report",
    "python -c 'import sys; print(sys.version)'", "pre-commit run --all-files",
    # node
    "node --version", "npm install", "npm ci", "npm test", "npm run build", "npm run lint",
    "npm run dev", "npx tsc --noEmit", "npx eslint src", "npx prettier --write src",
    "yarn install", "yarn build", "pnpm install", "pnpm test", "node scripts/gen.js",
    "npm ls react", "npm outdated", "npx jest --watchAll=false",
    # rust, go, c
    "cargo build", "cargo build --release", "cargo test", "cargo clippy -- -D warnings",
    "cargo fmt", "cargo run -- --help", "cargo add serde", "go build ./...", "go test ./...",
    "go mod tidy", "go vet ./...", "go run main.go", "gcc -O2 -o app main.c", "make",
    "make test", "make -j4", "make clean", "cmake -S . -B build", "cmake --build build",
    # containers
    "docker build -t app .", "docker build -f Dockerfile.dev -t app:dev .", "docker ps",
    "docker images", "docker logs app", "docker compose up -d", "docker compose down",
    "docker run --rm app pytest", "docker exec -it app bash -lc 'ls'", "docker compose build",
    # files and search
    "ls", "ls -la", "ls -R src", "tree -L 2", "cat README.md", "head -n 50 src/app.py",
    "tail -f logs/app.log", "wc -l src/*.py", "grep -rn TODO src", "grep -ri 'error' logs/",
    "rg 'def main' src", "rg -l import", "find . -name '*.py'", "find . -type f -newer setup.py",
    "find src -name '__pycache__' -type d", "sed -n '1,40p' src/app.py", "sed -n '/def /p' src/app.py",
    "sed -i 's/foo/bar/g' src/app.py", "awk '{print $1}' data.txt", "sort data.txt | uniq -c",
    "cut -d, -f1 data.csv", "jq '.name' package.json", "diff a.txt b.txt", "du -sh .",
    "df -h", "mkdir -p build/out", "touch src/__init__.py", "cp src/app.py /tmp/app.py",
    "mv old.txt new.txt", "rm build/out/a.o", "rm -rf build", "rm -rf node_modules",
    "ln -s src/app.py app.py", "chmod +x scripts/build.sh", "tar czf dist.tgz src",
    "tar xzf dist.tgz -C build", "unzip -o archive.zip -d build", "zip -r out.zip src",
    "./scripts/build.sh", "bash scripts/build.sh", "sh -c 'echo ok'",
    # network reads and misc
    "curl -sS https://pypi.org/pypi/requests/json", "wget -q https://example.com/file.tgz",
    "curl -I https://example.com", "echo $PATH", "which python", "env | sort",
    "ps aux | grep python", "kill $(cat server.pid)", "lsof -i :8000", "sleep 2",
    "date -u", "history | tail", "export DEBUG=1 && pytest -q", "cd src && ls",
    "cd tests && pytest -q", "echo 'hello' > out.txt", "printf '%s\n' a b > list.txt",
    "cat data.txt | sort | head", "xargs -n1 echo < list.txt", "time make test",
    "timeout 60 pytest -q", "nohup python -m http.server 8000 > server.log 2>&1 &",
    "sqlite3 app.db 'select count(*) from users'", "psql -c 'select 1'", "htop -n 1",
]  # fmt: skip

# Issue 33's disguised forms, for timing only (tests/unit/test_gate_principles.py judges them).
DISGUISED = [
    "rm --recur --force ~", "rsync -a --del /empty/ ~/", "kill -9 $(ps -eo pid=)",
    "cat ${PWD%/bots/*}/atlas.db", "CDPATH=../../..; cd vault; cat x", "poetry run rm -rf ~",
    "nix-shell --run 'rm -rf ~'", "gdb -ex 'python import os; os.system(\"ls\")' -batch",
    "python3 -c 'from os import system as s; s(\"rm -rf ~\")'", "perl -e 'open(F, \"ls|\")'",
    "busctl call org.freedesktop.login1 /org/freedesktop/login1 x.Manager PowerOff b false",
    "psql -c 'DELETE FROM users WHERE 1=1'", "cp -t /etc/cron.d evil",
    "for i in a b c; do echo $i | sed -n 'p' | tee -a out.txt; done && git add -A && "
    "git commit -m \"$(date -u)\" && npm run build -- --mode=production 2>&1 | tail -n 20",
]  # fmt: skip

FILES = {
    "Makefile": "test:\n\tpytest -q\nclean:\n\trm -rf build\n",
    "package.json": '{"name": "app", "scripts": {"test": "jest", "build": "tsc", '
    '"lint": "eslint src", "dev": "vite"}}',
    "manage.py": "import sys\nprint(sys.argv)\n",
    "setup.py": "from setuptools import setup\nsetup()\n",
    "requirements.txt": "requests\n",
    "scripts/build.sh": "#!/bin/sh\nset -e\nmkdir -p build\necho built\n",
    "scripts/build.py": "print('built')\n",
    "scripts/gen.js": "console.log('gen')\n",
    "src/app.py": "def main():\n    pass\n",
    "main.go": "package main\nfunc main() {}\n",
    "main.c": "int main(void) { return 0; }\n",
    "data.txt": "a\nb\n",
    "server.pid": "12345\n",
}


def workspace_home(root: Path) -> tuple[Path, Path]:
    """A temporary Atlas home with a bot whose workspace holds the files the commands name."""
    home = root / "home" / ".atlas"
    workspace = home / "bots" / "main" / "workspace"
    for name, text in FILES.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return home, workspace


def judge_all(home: Path, workspace: Path) -> dict[str, list[tuple[str, str, str]]]:
    verdicts: dict[str, list[tuple[str, str, str]]] = {"default": [], "auto": []}
    for command in ORDINARY:
        for mode in ("default", "auto"):
            verdict = classify(
                command, auto=mode == "auto", home=home, user_home=home.parent,
                workspace=workspace, cwd=workspace,
            )  # fmt: skip
            verdicts[mode].append((command, verdict.verdict, verdict.rule))
    return verdicts


def timings(
    home: Path, workspace: Path, rounds: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Milliseconds per judgment, by command, `rounds` times each after a warm-up. With
    `clock=time.thread_time`, the CPU this thread spent: on a shared machine, wall time also
    counts the time another process held the core (a p99 of 10–40 ms at a load of 12)."""
    commands = [c for c in ORDINARY + DISGUISED if len(c.encode()) < 1024]
    for command in commands:  # warm-up: the grammar and patterns load on first use
        classify(command, home=home, user_home=home.parent, workspace=workspace, cwd=workspace)
    found: dict[str, list[float]] = {command: [] for command in commands}
    for _ in range(rounds):
        for command in commands:
            start = clock()
            classify(command, home=home, user_home=home.parent, workspace=workspace, cwd=workspace)
            found[command].append((clock() - start) * 1000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="list what is not allowed")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        home, workspace = workspace_home(Path(folder))
        verdicts = judge_all(home, workspace)
        by_command = timings(home, workspace, options.rounds)
        by_command_cpu = timings(home, workspace, options.rounds, clock=time.thread_time)
    times = sorted(t for found in by_command.values() for t in found)
    cpu = sorted(t for found in by_command_cpu.values() for t in found)
    # each command's median: a judgment's own cost, without the shared machine's hiccups
    medians = sorted(statistics.median(found) for found in by_command.values())
    total = len(ORDINARY)
    count = {
        mode: {kind: sum(1 for _, v, _ in found if v == kind) for kind in
               ("allow", "guardian", "ask", "block")}
        for mode, found in verdicts.items()
    }  # fmt: skip
    figures = {
        "commands": total,
        "allowed_auto": count["auto"]["allow"],
        "allowed_auto_percent": round(100 * count["auto"]["allow"] / total, 1),
        "allowed_default": count["default"]["allow"],
        "allowed_default_percent": round(100 * count["default"]["allow"] / total, 1),
        "guardian_default": count["default"]["guardian"],
        "asked_auto": count["auto"]["ask"],
        "blocked": count["default"]["block"],
        "judgments_timed": len(times),
        "p50_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[int(len(times) * 0.99) - 1], 3),
        "max_ms": round(times[-1], 3),
        "p99_of_command_medians_ms": round(medians[int(len(medians) * 0.99) - 1], 3),
        "cpu_p50_ms": round(statistics.median(cpu), 3),
        "cpu_p99_ms": round(cpu[int(len(cpu) * 0.99) - 1], 3),
        "cpu_max_ms": round(cpu[-1], 3),
    }
    if options.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")
    if options.show:
        for mode, found in verdicts.items():
            for command, verdict, rule in found:
                if verdict != "allow":
                    print(f"  {mode:8} {verdict:8} {rule:36} {command}")


if __name__ == "__main__":
    main()
