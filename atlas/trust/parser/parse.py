"""A shell line parsed with tree-sitter-bash, walked into the simple commands it can run.

The walker visits lists, pipelines, subshells, groups, if/while/for/case bodies and function
bodies; it resolves words (quotes, `$'…'`, braces, variables set earlier on the line, `$(…)`),
and hands each simple command to `parse_commands.CommandJudge`, which unwraps it and follows the
code it runs. Tree-sitter parses in linear time; the walk is bounded in depth and in parts.
The walker is given `normalise.analyse` (it does not import normalise, which imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from atlas.trust.parser.interpreters import inline_code, language_of, script_argument
from atlas.trust.parser.parse_commands import CommandJudge
from atlas.trust.parser.parse_types import SUBSTITUTION, AnalyseLine, Analysis, Part, Upstream, Word
from atlas.trust.parser.parse_words import (
    ansi_c,
    brace_expand,
    double_quoted,
    has_glob,
    quoted,
    unescape,
    unquoted,
)
from atlas.trust.parser.shell_grammar import PARSER
from atlas.trust.parser.shell_state import evaluated, prints_working_folder

MAX_DEPTH = 6  # nested `bash -c` / `$(…)` levels followed; deeper is judged as opaque
MAX_PARTS = 2000  # simple commands judged on one line; more is judged as opaque
MAX_NESTING = 60  # `( ( ( … ) ) )` deeper than this is judged as opaque
MAX_LOOP_VALUES = 8  # a `for` body is walked once per value, for this many values
# Variables whose value is a path the rules spell out themselves (`$HOME`): not "computed".
KNOWN_ENV = {"HOME", "PWD", "OLDPWD", "USER", "LOGNAME", "TMPDIR", "ATLAS_HOME", "VIRTUAL_ENV",
             "CONDA_PREFIX", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "SHELL"}  # fmt: skip
IGNORED_STATEMENTS = {"comment", "unset_command", ";", "&", "&&", "||", "|", "|&", "\n"}


@dataclass
class Scope:
    """What the line has set so far: variables (None = unknown value), aliases, functions."""

    variables: dict[str, str | None] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    functions: set[str] = field(default_factory=set)
    parts_left: int = MAX_PARTS


class Walker:
    """Walks one parsed line (or a string a shell runs) into an Analysis."""

    def __init__(
        self,
        analysis: Analysis,
        scope: Scope,
        depth: int,
        wrappers: list[str],
        function: str | None = None,
        *,
        analyse: AnalyseLine,
    ) -> None:
        self.analysis = analysis
        self.scope = scope
        self.depth = depth
        self.wrappers = wrappers
        self.function = function
        self.analyse = analyse  # normalise.analyse: for shell code inside other code
        self.upstream: Upstream | None = None  # set for the next command that reads a pipe
        self.last_output: Upstream | None = None
        self.nesting = 0  # groups, subshells and bodies entered; bounded (Python's stack is)
        self.judge = CommandJudge(self)

    # ------------------------------------------------------------ entry points

    def run(self, source: str) -> None:
        tree = PARSER.parse(source.encode("utf-8", "surrogatepass"))
        if tree.root_node.has_error:
            fixed = _brace_words_first(source)
            if fixed != source:
                retry = PARSER.parse(fixed.encode("utf-8", "surrogatepass"))
                tree = tree if retry.root_node.has_error else retry
        if tree.root_node.has_error:
            self.analysis.note("parse-error: the shell grammar could not read part of the line")
        self.walk(tree.root_node)

    def sub_shell(self, code: str, wrappers: list[str], origin_taint: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
        """Judge a string that a shell will run (`bash -c`, `su -c`, `eval`, a heredoc)."""
        if self.depth + 1 > MAX_DEPTH:
            self.analysis.note("too-deep: commands nested too deeply to follow")
            return
        self._inner(wrappers).run(code)

    def _inner(self, wrappers: list[str]) -> Walker:
        """A walker one level deeper, on the same analysis and scope (for `bash -c`, `$(…)`)."""
        inner = Walker(self.analysis, self.scope, self.depth + 1, wrappers, self.function,
                       analyse=self.analyse)  # fmt: skip
        inner.nesting = self.nesting
        return inner

    # ------------------------------------------------------------ statements

    def walk(self, node: Node) -> None:
        if self.nesting >= MAX_NESTING:
            self.analysis.note("too-deep: commands nested too deeply to follow")
            return
        self.nesting += 1
        try:
            self._walk(node)
        finally:
            self.nesting -= 1

    def _walk(self, node: Node) -> None:
        kind = node.type
        if self.scope.parts_left <= 0 or kind in IGNORED_STATEMENTS:
            if self.scope.parts_left <= 0:
                self.analysis.note("too-long: more commands than can be judged")
            return
        if kind == "command":
            self.judge.command(node, [])
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind == "pipeline":
            self.pipeline(node)
        elif kind == "function_definition":
            self.function_definition(node)
        elif kind == "variable_assignment":
            self.assign(node)
        elif kind == "declaration_command":
            self.declaration(node)
        elif kind == "for_statement":
            self.for_loop(node)
        elif kind in ("command_substitution", "process_substitution"):
            self.word_fields(node)
        else:
            if kind == "ERROR":
                self.analysis.note("parse-error: the shell grammar could not read part of the line")
            for child in node.named_children:
                self.walk(child)

    def redirected(self, node: Node) -> None:
        body = node.child_by_field_name("body")
        redirects = [c for c in node.named_children if c != body]
        if body is not None and body.type == "command":
            self.judge.command(body, redirects)
            return
        before = len(self.analysis.parts)
        if body is not None:
            self.walk(body)
        words, _, _ = self.judge.redirect_words(redirects)
        if body is None and words:  # `> ../config.toml` alone: the redirect opens the file
            self.judge.run([Word(":")], self.wrappers, words, None, None, None)
        elif len(self.analysis.parts) > before:
            self.analysis.parts[-1].words.extend(w.text for w in words)
        self.continuations(redirects)

    def continuations(self, redirects: list[Node]) -> None:
        """`cat <<EOF | bash && x`: tree-sitter hangs the rest of the line off the heredoc."""
        for redirect in redirects:
            if redirect.type != "heredoc_redirect":
                continue
            for child in redirect.named_children:
                if child.type in ("heredoc_start", "heredoc_body", "heredoc_end"):
                    continue
                if child.type in ("pipeline", "list") and child.children[:1]:
                    self.upstream = self.last_output if child.children[0].type == "|" else None
                self.walk(child)

    def pipeline(self, node: Node) -> None:
        piped = False
        for child in node.children:
            if child.type in ("|", "|&"):
                piped = True
                continue
            if not child.is_named:
                continue
            self.upstream = self.last_output if piped else None
            self.last_output = None
            self.walk(child)
            piped = False
        self.upstream = None

    def function_definition(self, node: Node) -> None:
        name_node = node.child_by_field_name("name")
        name = name_node.text.decode(errors="replace") if name_node and name_node.text else "?"
        self.scope.functions.add(name)
        outer, self.function = self.function, name
        for child in node.named_children:
            if child != name_node:
                self.walk(child)
        self.function = outer

    def assign(self, node: Node) -> None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None or name_node.text is None:
            return
        name = name_node.text.decode(errors="replace")
        if value_node is None:
            self.scope.variables[name] = ""
            return
        words = self.word_fields(value_node, split=False)
        known = all("computed" not in w.taint and "unknown" not in w.taint for w in words)
        self.scope.variables[name] = " ".join(w.text for w in words) if known else None

    def declaration(self, node: Node) -> None:
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child)
            elif child.type == "variable_name" and child.text is not None:
                self.scope.variables.setdefault(child.text.decode(errors="replace"), "")
            else:
                self.word_fields(child)  # options, and any $(…) in them

    def for_loop(self, node: Node) -> None:
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values: list[Word] = []
        for child in node.children_by_field_name("value"):
            values.extend(self.word_fields(child))
        name = variable.text.decode(errors="replace") if variable and variable.text else ""
        known = [w.text for w in values if not w.taint and not w.glob]
        rounds: list[str | None] = known[:MAX_LOOP_VALUES] if len(known) == len(values) else []
        for value in rounds or [None]:
            self.scope.variables[name] = value
            if body is not None:
                self.walk(body)

    # ------------------------------------------------------------ words

    def word_fields(self, node: Node, split: bool = True) -> list[Word]:
        """A word node as the words it becomes: quotes removed, variables and braces expanded."""
        builder = _FieldBuilder(split)
        self._append(node, builder, in_quotes=False)
        words: list[Word] = []
        raw = node.text or b""
        keep_empty = b'"' in raw or b"'" in raw
        for escaped in builder.fields:
            if not escaped and not keep_empty:
                continue
            for expanded in brace_expand(escaped) if split else [escaped]:
                taint = frozenset(builder.taint)
                words.append(Word(unescape(expanded), has_glob(expanded), taint))
        return words

    def _append(self, node: Node, out: _FieldBuilder, in_quotes: bool) -> None:
        self.nesting += 1
        try:
            if self.nesting >= MAX_NESTING:
                self.analysis.note("too-deep: a word nested too deeply to follow")
                out.taint.add("computed")
                return
            self._append_node(node, out, in_quotes)
        finally:
            self.nesting -= 1

    def _append_node(self, node: Node, out: _FieldBuilder, in_quotes: bool) -> None:
        kind, text = node.type, (node.text or b"").decode("utf-8", "replace")
        if kind == "word" or kind == "number" or kind == "brace_expression":
            out.add(quoted(text) if in_quotes else unquoted(text))
        elif kind == "raw_string":
            out.add(quoted(text[1:-1]))
        elif kind == "ansi_c_string":
            out.add(quoted(ansi_c(text[2:-1])))
        elif kind in ("string", "translated_string"):
            self._string(node, out)
        elif kind == "concatenation":
            for child in node.children:
                self._append(child, out, in_quotes)
        elif kind in ("simple_expansion", "expansion"):
            self._expansion(node, out, in_quotes)
        elif kind == "command_substitution" and prints_working_folder(text):
            out.add(quoted("${PWD}"))  # `$(pwd)` is `$PWD`, which the rules spell out
        elif kind in ("command_substitution", "process_substitution"):
            out.add(SUBSTITUTION)
            out.taint |= self._substitution(node)
        else:  # arithmetic and the rest: their text, with any $(…) inside judged
            for child in node.named_children:
                if child.type in ("command_substitution", "process_substitution"):
                    out.taint |= self._substitution(child)
            out.add(quoted(text) if in_quotes or kind != "word" else unquoted(text))

    def _string(self, node: Node, out: _FieldBuilder) -> None:
        out.add("")  # "" is a word even when empty
        position = node.start_byte + (2 if node.type == "translated_string" else 1)
        for child in node.children:
            if child.start_byte > position:
                gap = (node.text or b"")[
                    position - node.start_byte : child.start_byte - node.start_byte
                ]
                out.add(double_quoted(gap.decode("utf-8", "replace")))
            position = max(position, child.end_byte)
            if child.type == "string_content":
                out.add(double_quoted((child.text or b"").decode("utf-8", "replace")))
            elif child.is_named:
                self._append(child, out, in_quotes=True)

    def _expansion(self, node: Node, out: _FieldBuilder, in_quotes: bool) -> None:
        text = (node.text or b"").decode("utf-8", "replace")
        names = [
            c for c in node.named_children if c.type in ("variable_name", "special_variable_name")
        ]
        name = (names[0].text or b"").decode() if names else ""
        simple = node.type == "simple_expansion" or text == "${" + name + "}"
        if name == "IFS" and simple:
            out.add(" " if in_quotes else "", split_after=not in_quotes)
            return
        value = self.scope.variables.get(name) if simple else None
        if not simple and self.scope.variables.get(name) is not None:
            value = evaluated(text, name, self.scope.variables[name])  # `${X%/*}`, `${X:0:1}`
        if text.startswith("${!"):  # `${!x}`: the variable named by x's value
            out.add(SUBSTITUTION)
            out.taint.add("computed")
            return
        if value is None:
            for child in node.named_children:  # ${x:-$(cmd)} still runs cmd
                if child.type in ("command_substitution", "process_substitution"):
                    out.taint |= self._substitution(child)
            out.add(quoted(text))
            if name not in KNOWN_ENV:
                out.taint.add("unknown")
            return
        if in_quotes:
            out.add(quoted(value))
            return
        pieces = value.split()
        for index, piece in enumerate(pieces):
            if index:
                out.new_field()
            out.add("".join("\\" + c if c in "\\{}," else c for c in piece))

    def _substitution(self, node: Node) -> set[str]:
        """Judge `$(…)`, backticks and `<(…)`; the taint of what they print."""
        if node.type == "process_substitution":
            self.analysis.process_substitution = True
        if self.depth + 1 > MAX_DEPTH:
            self.analysis.note("too-deep: commands nested too deeply to follow")
            return {"computed"}
        inner = self._inner(self.wrappers)
        start = len(self.analysis.parts)
        redirects = [c for c in node.named_children if c.type == "file_redirect"]
        if redirects and len(redirects) == len(node.named_children):  # `$(< FILE)` reads FILE
            words, _, _ = self.judge.redirect_words(redirects)
            self.judge.run([Word("cat")], self.wrappers, words, None, None, None)
        for child in [] if redirects else node.named_children:
            inner.walk(child)
        if node.type == "process_substitution" and _reads_stdin(self.analysis.parts[start:]):
            self.analysis.note("piped-code: a process substitution runs what is written to it")
        taint = {"computed"} | ({"procsub"} if node.type == "process_substitution" else set())
        for part in self.analysis.parts[start:]:
            taint |= self.judge.output_taint(part)
        return taint


def _brace_words_first(source: str) -> str:
    """`{rm,-rf,~}` where a command starts reads as a group to tree-sitter; to bash it is a
    brace expansion. `""{rm,-rf,~}` means the same to bash and parses as a word."""
    out: list[str] = []
    at_start = True
    quote = ""
    for index, char in enumerate(source):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif (
            char == "{" and at_start and source[index + 1 : index + 2] not in ("", " ", "\t", "\n")
        ):
            out.append('""')
        out.append(char)
        if not quote and char not in " \t":
            at_start = char in ";|&(\n"
    return "".join(out)


class _FieldBuilder:
    """Collects the escaped text of a word; an unquoted variable's spaces start a new field."""

    def __init__(self, split: bool) -> None:
        self.fields: list[str] = [""]
        self.split = split
        self.taint: set[str] = set()

    def add(self, text: str, split_after: bool = False) -> None:
        self.fields[-1] += text
        if split_after:
            self.new_field()

    def new_field(self) -> None:
        if not self.split:
            self.fields[-1] += " "
            return
        if self.fields[-1]:
            self.fields.append("")


def _reads_stdin(parts: list[Part]) -> bool:
    """`>(sh)`, `>(python3)`: a shell or interpreter with no code or script runs its input."""
    return any(
        language_of(p.head) and inline_code(p, every=True) is None and script_argument(p) is None
        for p in parts
        if p.words
    )
