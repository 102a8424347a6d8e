"""What the command parser produces: the simple commands a line runs (Parts), and what it could
not resolve; and what its modules hand each other (a pipe's upstream stage, `analyse`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

SUBSTITUTION = "$SUBSTITUTION"  # stands for a value only known when the command runs


@dataclass
class Part:
    """One simple command: its words, the wrappers it was found inside, and what fed it."""

    words: list[str]
    wrappers: list[str] = field(default_factory=list)
    piped_from: str | None = None  # head of the previous stage when this part reads a pipe
    heredoc: str | None = None  # the text fed to stdin by `<<EOF` or `<<<`
    origin: str = "shell"  # "shell", or the interpreter whose code this part was derived from
    function: str | None = None  # the function whose body this part is in (innermost)
    globbed: set[int] = field(default_factory=set)  # indices of words with an unquoted * ? [

    @property
    def head(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Analysis:
    parts: list[Part] = field(default_factory=list)
    process_substitution: bool = False
    unresolved: list[str] = field(default_factory=list)  # "key: why", e.g. "fetched-code: …"

    def merge(self, other: Analysis) -> None:
        self.parts.extend(other.parts)
        self.process_substitution |= other.process_substitution
        for reason in other.unresolved:
            self.note(reason)

    def note(self, reason: str) -> None:
        if reason not in self.unresolved:
            self.unresolved.append(reason)


@dataclass(frozen=True)
class Word:
    """One word of a command as the parser resolved it."""

    text: str
    glob: bool = False  # has an unquoted * ? [
    taint: frozenset[str] = (
        frozenset()
    )  # "fetched", "decoded", "computed": where its value came from


@dataclass
class Upstream:
    """The stage a pipe reads from: its name, where its output came from, a literal it echoes."""

    head: str
    taint: frozenset[str]
    echoed: str | None = None


# `normalise.analyse`: a shell line, at a nesting depth, taken apart. The walker is handed it
# (it follows shell code found inside other code from the top again) instead of importing it.
AnalyseLine = Callable[[str, int], Analysis]
