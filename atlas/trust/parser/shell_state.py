"""What the shell itself resolves that a plain reading of the words misses (issue 33,
principle 2): `$(pwd)` is the working folder, `cd NAME` searches `CDPATH` first, and an
operator in `${X%pattern}` changes the value.

Where the value cannot be known, the word keeps a `$` so the rules read it as not understood.
"""

from __future__ import annotations

import re

from atlas.trust.parser.parameters import evaluate
from atlas.trust.parser.parse_types import Word

PWD_COMMAND = re.compile(r"\$\(\s*pwd(?:\s+-[LP])?\s*\)|`\s*pwd(?:\s+-[LP])?\s*`")
CD_OPTIONS = {"-L", "-P", "-e", "-@", "--"}


def prints_working_folder(text: str) -> bool:
    """`$(pwd)`, `` `pwd` ``, `$(pwd -P)`: a substitution that prints the working folder."""
    return len(text) < 40 and PWD_COMMAND.fullmatch(text) is not None


def evaluated(text: str, name: str, value: str) -> str | None:
    """`${name<operator>}` (its source text) for a variable the line set to `value`; None when
    the result is not known."""
    length = text.startswith("${#")
    start = 3 + len(name) if length else 2 + len(name)
    if not text.endswith("}") or len(text) < start + 1:
        return None
    return evaluate(value, text[start:-1], length=length)


def cd_through_cdpath(words: list[Word], variables: dict[str, str | None]) -> list[Word]:
    """`CDPATH=../../..; cd vault` goes to `../../../vault`: bash searches CDPATH before the
    working folder for a name that does not start with `/`, `./` or `../`. The first entry is
    taken (bash takes the first that exists); an unknown CDPATH leaves the folder unknown."""
    if not words or words[0].text not in ("cd", "pushd") or "CDPATH" not in variables:
        return words
    rest = [w for w in words[1:] if w.text not in CD_OPTIONS]
    if not rest:
        return words
    target = rest[0].text
    if target.startswith(("/", "./", "../", "~", "$")) or target in (".", "..", "-"):
        return words
    value = variables["CDPATH"]
    if value is None:
        return [words[0], Word("${CDPATH}/" + target, taint=frozenset({"unknown"}))]
    entry = next((e for e in value.split(":") if e), "")
    if entry in ("", "."):
        return words
    return [words[0], Word(entry.rstrip("/") + "/" + target, rest[0].glob, rest[0].taint)]
