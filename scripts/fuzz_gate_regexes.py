"""Look for regexes of the gate that take super-linear time on pathological model text.

    uv run python scripts/fuzz_gate_regexes.py [--size 16000] [--limit-ms 20] [--show N]

Every compiled pattern held at module level by `atlas.trust` and its parser (plus the injection
scanner's compiled set) is searched in inputs built to make a backtracking engine work: one
character repeated, and each literal fragment of the pattern's own source repeated (`fetch(`,
`urlopen(`, `-`, blanks…), at a quarter of `--size` and at `--size`, in CPU time (best of
three). A pattern is reported when the larger input takes longer than `--limit-ms`, or (above
2 ms) more than 8x the smaller one: linear is 4x.
Prints one line per finding, slowest first; exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import atlas.trust
import atlas.trust.parser

BASE_FRAGMENTS = ["-", " ", "a", "a ", "'", '"', "(", ")", "$", "${", "\\", "/", ".", ";", "=",
                  "\n", "a(", "a.", "0", "%41", "&#1;", "x ", "-a "]  # fmt: skip
LITERAL = re.compile(r"[A-Za-z_:./()=$-]{2,12}")


Run = Callable[[str], object]


def gate_patterns() -> Iterator[tuple[str, re.Pattern[str], Run]]:
    """Each pattern with the way its module runs it: one only ever anchored (`NAME.match(`,
    `NAME.fullmatch(`) is timed so, since an anchored `\\s*x` is linear where a search is not."""
    for package in (atlas.trust, atlas.trust.parser):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            source = inspect.getsource(module)
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                    used = set(re.findall(rf"\b{name}\.(\w+)\(", source))
                    anchored = used and used <= {"match", "fullmatch"}
                    run = value.fullmatch if anchored else value.search
                    yield f"{module.__name__}.{name}", value, run
    from atlas.trust import threats

    patterns, folded, squeezed = threats._patterns()
    for index, (why, pattern) in enumerate([*patterns, *folded, ("squeezed", squeezed)]):
        yield f"atlas.trust.threats[{index}] {why}", pattern, pattern.search


def fragments(pattern: re.Pattern[str]) -> list[str]:
    """Pieces that match the start of some branch: the literals of its source, unescaped."""
    source = pattern.pattern.replace("\\b", " ").replace("\\s*", "").replace("\\s+", " ")
    found = {m.group(0).replace("\\", "") for m in LITERAL.finditer(source.replace("\\", ""))}
    return sorted(found)[:80]


def seconds(run: Run, text: str) -> float:
    """CPU seconds of this thread, best of three: another process holding the core (the machine
    is shared) would otherwise read as a slow pattern."""
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        run(text)
        best = min(best, time.thread_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=16_000)
    parser.add_argument("--limit-ms", type=float, default=20.0)
    parser.add_argument("--show", type=int, default=40)
    options = parser.parse_args()
    findings: list[tuple[float, str]] = []
    for name, pattern, run in gate_patterns():
        for piece in BASE_FRAGMENTS + fragments(pattern):
            big = piece * (options.size // len(piece))
            small = big[: len(big) // 4]
            slow = seconds(run, big)
            if slow * 1000 < 2:  # too fast to judge a growth rate from
                continue
            quick = max(seconds(run, small), 1e-6)
            if slow * 1000 > options.limit_ms or slow / quick > 8:
                findings.append(
                    (slow, f"{slow * 1000:8.1f} ms  x{slow / quick:5.1f}  {name}  {piece!r}")
                )
    for _, line in sorted(findings, reverse=True)[: options.show]:
        print(line)
    print(f"findings: {len(findings)}")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
