"""One simple command, judged: its words and redirects, aliases replaced, wrappers unwrapped, and
everything it runs besides followed (inline code, `eval`, here-docs fed to a shell, `find -exec`,
`git -c core.pager=…`, tar's exec actions, vim's `:!`, `rsync -e`).

What cannot be read before it runs is written to `Analysis.unresolved` ("key: why").
The Walker (parse.py, above this module) is imported for type checking only; shell code found
in other code is taken apart with the `analyse` the walker was given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tree_sitter import Node

from atlas.trust.parser.escapes import (
    ED,
    SQL_PIPES,
    client_commands,
    ed_commands,
    gdb_commands,
    gdb_escapes,
)
from atlas.trust.parser.interpreters import (
    code_parts,
    inline_code,
    interpreter_of,
    language_of,
    opaque_reason,
)
from atlas.trust.parser.parse_extras import (
    CODE_VARIABLES,
    CONFIG_VARIABLES,
    FETCHERS,
    LOADED_VARIABLES,
    LOADER,
    SOURCED_VARIABLES,
    code_strings,
    exec_commands,
    foreign_code,
    is_decoder,
)
from atlas.trust.parser.parse_types import SUBSTITUTION, Part, Upstream, Word
from atlas.trust.parser.parse_words import named_binary, operands_of, rejoined
from atlas.trust.parser.shell_state import cd_through_cdpath
from atlas.trust.parser.tails import scans_tails, shell_strings, tail_starts
from atlas.trust.parser.wrappers import name_of, unwrap

if TYPE_CHECKING:
    from atlas.trust.parser.parse import Walker

REASONS = {
    "fetched": "fetched-code: {who} runs code downloaded from the network",
    "decoded": "decoded-payload: {who} runs a payload decoded from base64/hex/escapes",
    "computed": "computed-code: {who} runs code built only when the line runs",
    "unknown": "computed-code: {who} runs code held in a variable not set on this line",
    "procsub": "piped-code: {who} runs code produced by a process substitution",
}


class CommandJudge:
    def __init__(self, walker: Walker) -> None:
        self.walker = walker
        self.analysis = walker.analysis

    # ------------------------------------------------------------ words and redirects

    def command(self, node: Node, extra_redirects: list[Node]) -> None:
        walker = self.walker
        upstream, walker.upstream = walker.upstream, None
        argv: list[Word] = []
        redirects: list[Node] = []
        assignments: list[tuple[str, list[Word]]] = []
        word_nodes: list[Node] = []
        for child in node.named_children:
            if child.type == "variable_assignment":
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                words = walker.word_fields(value, split=False) if value is not None else []
                assignments.append(((name.text or b"").decode() if name else "", words))
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                redirects.append(child)
            elif child.type == "command_name":
                word_nodes.extend(child.named_children)
            elif child.is_named:
                word_nodes.append(child)
        for word_node in rejoined(word_nodes):
            argv.extend(walker.word_fields(word_node))
        redirect_words, heredoc, fed = self.redirect_words(redirects + extra_redirects)
        if not argv and redirects:
            argv = [Word(":")]  # `> ../config.toml` alone truncates the file
        if not argv:
            for name, words in assignments:
                taint = set().union(*(w.taint for w in words)) if words else set()
                value = " ".join(w.text for w in words)
                known = not (taint & {"computed", "unknown"})
                walker.scope.variables[name] = value if known else None
        for name, words in assignments:
            self.code_variable(name, " ".join(w.text for w in words), walker.wrappers)
        if argv:
            argv = self._alias(argv)
            self.run(argv, walker.wrappers, redirect_words, heredoc, fed, upstream)
        walker.continuations(redirects + extra_redirects)

    def code_variable(self, name: str, value: str, wrappers: list[str]) -> None:
        """`PAGER='rm -rf ~' man ls`, `BASH_ENV=x bash`, `LD_PRELOAD=x.so ls`: a variable whose
        value is run, sourced or loaded as code by the program it is given to."""
        if not value:
            return
        if name == "GIT_CONFIG_PARAMETERS":
            self.analysis.note(
                "computed-code: GIT_CONFIG_PARAMETERS sets git options, commands too"
            )
        elif name in SOURCED_VARIABLES:
            self.walker.sub_shell(f". {value}", wrappers + [name])
        elif (
            name in CODE_VARIABLES
            or name.startswith(CONFIG_VARIABLES[:1])
            or name in CONFIG_VARIABLES
        ):
            self.walker.sub_shell(value, wrappers + [name])
        elif name in LOADED_VARIABLES and (name != "NODE_OPTIONS" or LOADER.search(value)):
            self.analysis.note(f"computed-code: {name} loads code into the program it starts")

    def redirect_words(self, redirects: list[Node]) -> tuple[list[Word], str | None, Word | None]:
        """Redirect operators and targets as words; the heredoc body or here-string fed."""
        words: list[Word] = []
        heredoc: str | None = None
        fed: Word | None = None
        for redirect in redirects:
            if redirect.type == "heredoc_redirect":
                for child in redirect.named_children:
                    if child.type == "heredoc_body":
                        heredoc = (child.text or b"").decode("utf-8", "replace")
                        for inner in child.named_children:
                            if inner.type in ("command_substitution", "process_substitution"):
                                self.walker.word_fields(inner)
                heredoc = heredoc if heredoc is not None else ""
                continue
            operator = "".join(
                (c.text or b"").decode() for c in redirect.children if not c.is_named
            ) or ("<<<" if redirect.type == "herestring_redirect" else ">")
            descriptor = [c for c in redirect.named_children if c.type == "file_descriptor"]
            prefix = (descriptor[0].text or b"").decode() if descriptor else ""
            targets: list[Word] = []
            for child in redirect.named_children:
                if child.type != "file_descriptor":
                    targets.extend(self.walker.word_fields(child, split=False))
            target = targets[0] if targets else Word("")
            if operator in (">&", "<&") and (target.text.isdigit() or target.text == "-"):
                words.append(Word(prefix + operator + target.text))
                continue
            words += [Word(prefix + ("&>" if operator == ">&" else operator)), target]
            if redirect.type == "herestring_redirect":
                fed = target
                heredoc = target.text
        return words, heredoc, fed

    def _alias(self, argv: list[Word]) -> list[Word]:
        value = self.walker.scope.aliases.get(argv[0].text)
        if value is None:
            return argv
        return [Word(piece) for piece in value.split()] + argv[1:]

    # ------------------------------------------------------------ the command itself

    def run(
        self,
        argv: list[Word],
        wrappers: list[str],
        redirect_words: list[Word],
        heredoc: str | None,
        fed: Word | None,
        upstream: Upstream | None,
    ) -> Part | None:
        walker, analysis = self.walker, self.analysis
        unwrapped = unwrap(argv)
        all_wrappers = wrappers + unwrapped.wrappers
        for code in unwrapped.code:
            walker.sub_shell(code, all_wrappers)
        words = unwrapped.words
        for word in argv[: len(argv) - len(words)]:  # `env BASH_ENV=x bash`, `sudo PAGER=… man`
            name, equals, value = word.text.partition("=")
            if equals and name.isupper():
                self.code_variable(name, value, wrappers)
        for read in unwrapped.reads:  # `xargs -a FILE`: judged as a file the command reads
            redirect_words = [*redirect_words, Word("<"), read]
        if not words and redirect_words and not unwrapped.code:
            words = [Word(":")]  # `> file`, `exec 3< file`: the redirects still open files
        if unwrapped.reads_stdin:
            self._feeds_shell(unwrapped.reads_stdin, "shell", heredoc, fed, upstream, all_wrappers)
        if not words:
            walker.last_output = self._output(None, argv, upstream)
            return None
        head = words[0]
        if head.text.startswith("/") and name_of(head.text) and named_binary(head.text):
            words = [Word(name_of(head.text), head.glob, head.taint), *words[1:]]
        separators = (walker.scope.variables.get("IFS") or "").strip(" \t\n")
        if any(ch in head.text for ch in separators[:16]):  # `IFS=,; c=rm,-rf,~; $c`
            analysis.note("computed-command: the changed IFS splits the command's name")
        if head.taint & {"computed", "unknown", "fetched"} or head.text.startswith("$"):
            reason = "fetched-code" if "fetched" in head.taint else "computed-command"
            analysis.note(f"{reason}: the command's name is only known when the line runs")
        words = cd_through_cdpath(words, walker.scope.variables)  # `CDPATH=../..; cd vault`
        everything = words + redirect_words
        part = Part(
            [w.text for w in everything],
            list(all_wrappers),
            upstream.head if upstream else None,
            heredoc,
            function=walker.function,
            globbed={i for i, w in enumerate(everything) if w.glob},
        )
        walker.scope.parts_left -= 1
        analysis.parts.append(part)
        self._define(words)
        self._follow(part, words, heredoc, fed, upstream)
        self._tails(part, words)
        walker.last_output = self._output(part, words, upstream)
        return part

    def _tails(self, part: Part, words: list[Word]) -> None:
        """`poetry run rm -rf ~`, `faketime X rm …`, `nix-shell --run 'rm …'`: a program not
        known to leave its arguments alone is judged with each command line they hold."""
        if not scans_tails(part.head):
            return
        texts = [w.text for w in words]
        wrappers = part.wrappers + [part.head]
        for start in tail_starts(texts):
            self.run(words[start:], wrappers, [], None, None, None)
        for code in shell_strings(texts):
            self.walker.sub_shell(code, wrappers)

    def _define(self, words: list[Word]) -> None:
        """`alias x='…'` and `read X` change what later words mean."""
        head = words[0].text
        if head == "alias":
            for word in words[1:]:
                name, equals, value = word.text.partition("=")
                if equals:
                    self.walker.scope.aliases[name] = value
                    self.walker.sub_shell(value, self.walker.wrappers)
        elif head in ("read", "mapfile", "readarray", "getopts", "printf"):
            texts = [w.text for w in words[1:]]
            for index, text in enumerate(texts):
                if head == "printf" and not (index and texts[index - 1] == "-v"):
                    continue
                if not text.startswith("-") and text.replace("_", "a").isalnum():
                    self.walker.scope.variables[text] = None

    def _follow(
        self,
        part: Part,
        words: list[Word],
        heredoc: str | None,
        fed: Word | None,
        upstream: Upstream | None,
    ) -> None:
        """What this command runs besides itself."""
        walker = self.walker
        head = part.head
        wrappers = part.wrappers
        for command in exec_commands(words):  # find -exec, and the like
            self.run(command, wrappers + [head], [], None, None, None)
        for code in code_strings(part.words):  # git -c core.pager=…, tar exec=, vim :!, rsync -e
            walker.sub_shell(code, wrappers + [head])
        foreign = foreign_code(part.words)
        if foreign:
            self.analysis.note(f"opaque-code: {foreign[0]} runs code in a language not read here")
        if heredoc is not None or upstream is not None:
            self._escapes_on_input(head, heredoc, upstream, wrappers)
        if head == "gdb":
            self._gdb(part.words, wrappers)
        language = language_of(head)
        if head == "eval":
            rest = words[2:] if words[1:2] and words[1].text == "--" else words[1:]
            self._runs_words(rest, "eval", wrappers + ["eval"])
            return
        if head == "trap" and len(words) > 2 and not words[1].text.startswith("-"):
            walker.sub_shell(words[1].text, wrappers + ["trap"])  # runs on a signal or exit
            return
        if head in ("source", ".") and len(words) > 1:
            if words[1].text in ("/dev/stdin", "-", "/dev/fd/0"):
                self._feeds_shell(head, "shell", heredoc, fed, upstream, wrappers)
            elif words[1].taint:
                self._taint_note(words[1].taint, head)
            return
        if language is None:
            return
        if head in ("deno", "bun") and "-" in part.words[2:] and part.words[1:2] == ["run"]:
            self._feeds_shell(head, language, heredoc, fed, upstream, wrappers)  # `deno run -`
            return
        if interpreter_of(head) is None and inline_code(part, every=True) is None:
            return  # `bun install`, `deno run x.ts`, awk -f prog: no code on the line
        code = inline_code(part, every=True)
        if code is not None:
            index = part.words.index(code) if code in part.words else -1
            taint = words[index].taint if 0 <= index < len(words) else frozenset()
            self._taint_note(taint, head)
            self._code(language, code, wrappers)
            return
        operands = operands_of(part.words)
        if operands and operands[0] not in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
            index = part.words.index(operands[0])
            if index < len(words) and words[index].taint:
                self._taint_note(words[index].taint, head)  # bash <(curl …)
            return
        self._feeds_shell(head, language, heredoc, fed, upstream, wrappers)

    def _gdb(self, words: list[str], wrappers: list[str]) -> None:
        """gdb's `-ex 'shell CMD'`, `'| CMD | SHELL'`, `'python CODE'`, `'call system(…)'`."""
        for command in gdb_commands(words):
            for line in command.split("\n")[:64]:
                found = gdb_escapes(line)
                if found is None:
                    continue
                kind, text = found
                if kind == "opaque":
                    self.analysis.note(f"opaque-code: {text}")
                else:
                    self._code(kind, text, wrappers + ["gdb"])

    def _escapes_on_input(
        self, head: str, heredoc: str | None, upstream: Upstream | None, wrappers: list[str]
    ) -> None:
        """ed's `!cmd` and a database shell's `.output |cmd` in the commands fed on stdin;
        a pipe whose text cannot be read feeds ed commands not understood."""
        if head not in ED and head not in SQL_PIPES:
            return
        script = heredoc if heredoc is not None else (upstream.echoed if upstream else None)
        if script is None:
            if head in ED and upstream is not None:
                self.analysis.note(f"piped-code: {head} runs commands piped from {upstream.head}")
            return
        found = ed_commands(script) if head in ED else client_commands(head, [script])
        for code in found:
            self.walker.sub_shell(code, wrappers + [head])

    def _feeds_shell(
        self,
        who: str,
        language: str,
        heredoc: str | None,
        fed: Word | None,
        upstream: Upstream | None,
        wrappers: list[str],
    ) -> None:
        """A shell or interpreter that runs what comes on stdin: a heredoc, a here-string, a pipe."""
        if fed is not None and fed.taint:
            self._taint_note(fed.taint, who)
        if heredoc is not None:
            self._code(language, heredoc, wrappers)
            return
        if upstream is None:
            return
        if upstream.taint:
            self._taint_note(upstream.taint, who)
        elif upstream.echoed is not None:
            self._code(language, upstream.echoed, wrappers)
        else:
            self.analysis.note(f"piped-code: {who} runs code piped from {upstream.head}")

    def _code(self, language: str, code: str, wrappers: list[str]) -> None:
        if language == "shell":
            self.walker.sub_shell(code, wrappers)
            return
        start = len(self.analysis.parts)
        derived = code_parts(language, code, self._analyse_for_code, self.walker.depth)
        for part in derived:
            part.wrappers = wrappers + part.wrappers
            part.function = self.walker.function
            if part.head == SUBSTITUTION:
                self.analysis.note(f"opaque-code: {language} code runs a command built at run time")
        self.analysis.parts[start:start] = derived
        reason = opaque_reason(language, code)
        if reason:
            self.analysis.note(reason)

    def _analyse_for_code(self, code: str, depth: int) -> list[Part]:
        inner = self.walker.analyse(code, depth)
        for reason in inner.unresolved:
            self.analysis.note(reason)
        self.analysis.process_substitution |= inner.process_substitution
        return inner.parts

    def _runs_words(self, words: list[Word], who: str, wrappers: list[str]) -> None:
        """`eval WORDS`: the words joined are a shell line."""
        taint = frozenset().union(*(w.taint for w in words)) if words else frozenset()
        if taint:
            self._taint_note(taint, who)
            if not taint & {"fetched", "decoded"}:
                self.analysis.note(f"eval: {who} runs a string only known when the line runs")
        self.walker.sub_shell(" ".join(w.text for w in words), wrappers)

    def _taint_note(self, taint: frozenset[str], who: str) -> None:
        for key in ("fetched", "decoded", "procsub", "computed", "unknown"):
            if key in taint:
                self.analysis.note(REASONS[key].format(who=who))
                return

    # ------------------------------------------------------------ output

    def output_taint(self, part: Part) -> set[str]:
        taint: set[str] = set()
        if part.head in FETCHERS:
            taint.add("fetched")
        if is_decoder(part.words):
            taint.add("decoded")
        return taint

    def _output(self, part: Part | None, words: list[Word], upstream: Upstream | None) -> Upstream:
        taint = set().union(*(w.taint for w in words)) if words else set()
        taint.discard("unknown")
        if part is not None:
            taint |= self.output_taint(part)
        if upstream is not None and not (part is not None and interpreter_of(part.head)):
            taint |= upstream.taint
        echoed = None
        texts = [w.text for w in words]
        if part is not None and part.head in ("echo", "printf") and not taint:
            arguments = [t for t in texts[1:] if t not in ("-n", "-e", "-E")]
            echoed = " ".join(arguments) if "%" not in " ".join(arguments) else None
        elif part is not None and part.head == "cat" and len(texts) == 1 and part.heredoc:
            echoed = part.heredoc  # cat <<EOF | sh
        head = part.head if part is not None else (name_of(texts[0]) if texts else "")
        return Upstream(head, frozenset(taint), echoed)
