"""An alternation of regexes, each run only on text that holds its keyword.

`re` tries every branch of `a|b|c|…` at every position of the text. With ~35 branches, each
opening on `\\b`, a 16,000-character line of `-` cost a `search` 13–30 ms (0.22 s on a loaded
machine) though nothing could match. Here each branch names a plain keyword it cannot match
without; the text is casefolded once, each keyword is looked for with `in` (a C scan), and only
the branches whose keyword is present are searched. A branch whose window may span many
starts of itself (`fetch(` … `body` within 300 characters) should end its window where the next
start begins, so no character is read by more than one start: see `window`.

    CODE = KeyedAlternation([("urlopen", r"\\burlopen\\b"), ...], re.IGNORECASE)
    match = CODE.search(code)  # the leftmost match of any branch, or None
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# What `re.IGNORECASE` equates but `str.casefold` keeps apart, so that a keyword test never
# passes over text a branch would match (dotless ı matches `i`; casefold already maps ſ and K).
_IGNORECASE_EXTRAS = str.maketrans({"ı": "i", "İ": "i"})


def window(start: str, span: int, end: str, stop: str = r"\n") -> str:
    """`start`, then at most `span` characters (none of `stop`, and not the beginning of another
    `start`), then `end`: linear, since each character belongs to the window of one start."""
    return rf"{start}(?:(?!{start})[^{stop}]){{0,{span}}}?{end}"


class KeyedAlternation:
    def __init__(self, branches: Sequence[tuple[str, str]], flags: int = 0) -> None:
        for keyword, _ in branches:
            if keyword != keyword.casefold() or not keyword:
                raise ValueError(f"a branch keyword must be casefolded and non-empty: {keyword!r}")
        self.branches = [(keyword, re.compile(source, flags)) for keyword, source in branches]
        self.pattern = "|".join(source for _, source in branches)

    def search(self, text: str) -> re.Match[str] | None:
        folded = text.casefold().translate(_IGNORECASE_EXTRAS)
        found = [
            match
            for keyword, pattern in self.branches
            if keyword in folded and (match := pattern.search(text))
        ]
        return min(found, key=lambda match: match.start(), default=None)
