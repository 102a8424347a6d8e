"""`atlas trust check [--auto] [--json] -- COMMAND`: the verdict on a command, nothing run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from atlas.trust.rules import classify


def build_check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atlas trust check",
        description="Print the verdict (block, ask, guardian, allow) on a command without running it.",
    )
    parser.add_argument("--auto", action="store_true", help="judge as in auto mode")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--deny", action="append", default=[], help="a deny-list glob (repeatable)")
    parser.add_argument(
        "--home", type=Path, help="the Atlas home (default: $ATLAS_HOME or ~/.atlas)"
    )
    parser.add_argument("--cwd", type=Path, help="the folder scripts are read from")
    parser.add_argument(
        "--workspace",
        type=Path,
        help="the bot's workspace: the one place in the home a command may use without asking",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    return parser


# 2 is the usage error's (argparse's too); the verdicts take the others.
EXIT_CODES = {"allow": 0, "block": 1, "ask": 3, "guardian": 4}


def check_main(argv: list[str], deny: list[str] | None = None) -> int:
    """Parse the arguments, classify the command, print the verdict. The exit code is the
    verdict's (EXIT_CODES: 0 allow, 1 block, 3 ask, 4 guardian), 2 without a command, so a
    script can tell "would run" from "would be stopped" without parsing the text."""
    parser = build_check_parser()
    args = parser.parse_args(argv)
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        parser.print_usage()
        print("atlas trust check: no command given (put it after --)")
        return 2
    # One word is the command as typed in quotes; several are the words the shell split it into.
    command = words[0] if len(words) == 1 else " ".join(words)
    verdict = classify(
        command,
        auto=args.auto,
        deny=[*(deny or []), *args.deny],
        home=args.home,
        cwd=args.cwd,
        workspace=args.workspace,
    )
    if args.json:
        print(
            json.dumps({"verdict": verdict.verdict, "rule": verdict.rule, "reason": verdict.reason})
        )
    else:
        print(f"{verdict.verdict}: {verdict.rule}: {verdict.reason}")
    return EXIT_CODES[verdict.verdict]
