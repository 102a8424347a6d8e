"""The model's Markdown, parsed once by markdown-it-py, and the walk each chat platform's
renderer shares: blocks, lists, quotes, tables and inline styles, with the platform saying how
each piece looks and how its text is escaped.

The reading is CommonMark's (plus GFM tables and ~~strikethrough~~), so what counts as emphasis,
a code span or a link is what any Markdown viewer would show. Line breaks inside a paragraph are
kept: chat messages do not reflow text.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

RULE = "──────"
_STYLES = {"strong": "bold", "em": "italic", "s": "strike"}


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    # Chat platforms render no HTML, so raw HTML is not a construct here: `<div>` is text, and a
    # line starting with Slack's `<!here>` stays a paragraph instead of becoming an HTML block.
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    return parser.disable(["html_block", "html_inline"])


def parse(markdown: str) -> SyntaxTreeNode:
    """The syntax tree of `markdown` (CommonMark, GFM tables and strikethrough)."""
    return SyntaxTreeNode(_parser().parse(markdown))


class ChatRenderer:
    """Walks a Markdown syntax tree into one chat platform's markup; subclasses say how each
    piece looks. A style already open is not opened again inside itself (`# **x**` is bold once)."""

    bullet = "• "

    def __init__(self) -> None:
        self._open: list[str] = []
        self._lines: list[str] = []

    def render(self, markdown: str) -> str:
        self._lines = markdown.split("\n")
        return self.blocks(parse(markdown).children)

    # ------------------------------------------------------------ hooks for the platform

    def text(self, text: str) -> str:
        raise NotImplementedError

    def code(self, code: str) -> str:
        raise NotImplementedError

    def style(self, style: str, inner: str) -> str:
        """`inner` in bold, italic or strike."""
        raise NotImplementedError

    def link(self, href: str, label: str, autolink: bool) -> str:
        raise NotImplementedError

    def quote(self, body: str) -> str:
        raise NotImplementedError

    def code_block(self, code: str, language: str) -> str:
        raise NotImplementedError

    def preformatted(self, text: str) -> str:
        """A table, laid out in columns, in a monospaced block."""
        raise NotImplementedError

    # ------------------------------------------------------------ blocks

    def blocks(self, nodes: Sequence[SyntaxTreeNode], tight: bool = False) -> str:
        """Blocks one after another: a blank line between them where the source had one."""
        out: list[str] = []
        previous: SyntaxTreeNode | None = None
        for node in nodes:
            if previous is not None:
                out.append("\n" if tight or not self._blank_before(node) else "\n\n")
            out.append(self.block(node))
            previous = node
        return "".join(out)

    def _blank_before(self, node: SyntaxTreeNode) -> bool:
        """Whether a blank line (within any quote markers) stood just before this block."""
        if node.map is None or not 0 < node.map[0] <= len(self._lines):
            return True
        return not self._lines[node.map[0] - 1].strip(" \t>")

    def block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.inline(node.children[0])
        if kind == "heading":
            return self.styled("bold", node.children[0].children)
        if kind in ("bullet_list", "ordered_list"):
            return self.list_block(node)
        if kind == "blockquote":
            return self.quote(self.blocks(node.children))
        if kind in ("fence", "code_block"):
            language = node.info.split()[0] if node.info.strip() else ""
            return self.code_block(node.content.removesuffix("\n"), language)
        if kind == "table":
            return self.preformatted(layout_table(node))
        if kind == "hr":
            return RULE
        return self.text(node.content.rstrip("\n"))  # anything else: shown as written

    def list_block(self, node: SyntaxTreeNode) -> str:
        """Items under • (or their numbers), nested lists indented under their item."""
        items = node.children
        tight = all(
            child.hidden for item in items for child in item.children if child.type == "paragraph"
        )
        out: list[str] = []
        for item in items:
            marker = f"{item.info}{item.markup} " if node.type == "ordered_list" else self.bullet
            body = self.blocks(item.children, tight=tight)
            indent = " " * len(marker)
            lines = body.split("\n")
            out.append(
                "\n".join([marker + lines[0], *(indent + ln if ln else ln for ln in lines[1:])])
            )
        return ("\n" if tight else "\n\n").join(out)

    # ------------------------------------------------------------ inline

    def inline(self, node: SyntaxTreeNode) -> str:
        return "".join(self.span(child) for child in node.children)

    def span(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "text":
            return self.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return self.code(node.content)
        if kind in _STYLES:
            return self.styled(_STYLES[kind], node.children)
        if kind in ("link", "image"):
            href = str(node.attrs.get("href") or node.attrs.get("src") or "")
            label = "".join(self.span(child) for child in node.children)
            return self.link(href, label, node.info == "auto")
        return self.text(node.content)  # anything else: shown as written

    def styled(self, style: str, children: Sequence[SyntaxTreeNode]) -> str:
        if style in self._open:
            return "".join(self.span(child) for child in children)
        self._open.append(style)
        try:
            inner = "".join(self.span(child) for child in children)
        finally:
            self._open.pop()
        return self.style(style, inner) if inner else inner


def plain(node: SyntaxTreeNode) -> str:
    """An inline node's text without its markup."""
    if node.type in ("text", "code_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(plain(child) for child in node.children)


def layout_table(table: SyntaxTreeNode) -> str:
    """A GFM table as aligned plain-text columns, its header ruled off."""
    rows = [
        [plain(cell.children[0]) if cell.children else "" for cell in row.children]
        for section in table.children
        for row in section.children
    ]
    if not rows:
        return ""
    count = max(len(row) for row in rows)
    rows = [row + [""] * (count - len(row)) for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(count)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    ruler = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([line(rows[0]), ruler, *(line(row) for row in rows[1:])])


__all__ = ["RULE", "ChatRenderer", "layout_table", "parse", "plain"]
