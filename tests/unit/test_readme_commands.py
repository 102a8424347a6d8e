"""Every command in the README's table parses as written (options before or after the
subcommand, each alternative of `a|b|c`); tests/integration/test_newcomer.py runs them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from atlas.cli import build_parser, cmd_trust_check

README = Path(__file__).resolve().parents[2] / "README.md"
# A placeholder in the table → a value a newcomer might type.
VALUES = {
    "DIR": "/tmp/some-home",
    "NAME": "atlas",
    "JSON": "{}",
    "CMD": "ls -la",
    "N": "3",
    "QUERY": "hello",
    "PATH": "./my-skill",
    "CODE": "ABC123",
    '"SCHEDULE"': '"weekdays at 9am"',
}
NEEDS_A_NAME = {"show", "run", "pause", "resume", "history"}  # routines ACTION NAME


def table_commands() -> list[str]:
    """The table's commands with every optional part given and alternatives expanded."""
    commands = []
    for line in README.read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `(atlas [^`]*)` \|", line.replace("\\|", "\x00"))
        if not found:
            continue
        command = re.sub(r"\[([^\]]*)\]", r"\1", found.group(1))  # [--bot NAME] → --bot NAME
        # `atlas pairing list|approve CODE|deny CODE`: one command per alternative.
        head, _, rest = command.partition("\x00")
        start = head.rsplit(" ", 1)
        alternatives = [command]
        if rest:
            alternatives = [f"{start[0]} {choice}" for choice in [start[1], *rest.split("\x00")]]
        for alternative in alternatives:
            words = shlex.split(alternative, posix=False)
            argv = [VALUES.get(word, word) for word in words[1:]]
            if len(argv) > 1 and argv[0] == "routines" and argv[1] in NEEDS_A_NAME:
                argv.append("morning-briefing")
            if argv[:2] == ["routines", "next"] and len(argv) == 2:
                argv.append('"daily"')
            commands.append(" ".join(argv))
    return commands


def test_the_table_has_every_command() -> None:
    firsts = {command.split()[0] for command in table_commands()}
    assert {"init", "chat", "run", "doctor", "tool", "trust", "search"} <= firsts
    assert {"skills", "budget", "routines", "pairing"} <= firsts


@pytest.mark.parametrize("command", table_commands())
def test_a_table_command_parses_as_written(command: str) -> None:
    parser = build_parser()
    args, unknown = parser.parse_known_args(shlex.split(command))
    # Only `trust check` takes what argparse does not know (its command); see atlas.cli.main.
    assert not unknown or args.func is cmd_trust_check, (command, unknown)


@pytest.mark.parametrize("command", ["init --home /tmp/h", "--home /tmp/h init"])
def test_home_before_or_after_the_subcommand(command: str) -> None:
    args, unknown = build_parser().parse_known_args(shlex.split(command))
    assert (args.home, unknown) == ("/tmp/h", [])


def test_home_after_a_nested_action_wins_over_one_before() -> None:
    args, _ = build_parser().parse_known_args(
        ["--home", "/tmp/a", "routines", "list", "--home", "/tmp/b"]
    )
    assert args.home == "/tmp/b"
