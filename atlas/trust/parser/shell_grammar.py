"""tree-sitter-bash's grammar and the one parser built from it.

Its own module so that `parse.py` (which walks a whole line) and `parse_words.py` (which parses
a word again when tree-sitter split it in two) share the parser without importing each other.
"""

from __future__ import annotations

import tree_sitter_bash
from tree_sitter import Language, Parser

LANGUAGE = Language(tree_sitter_bash.language())
PARSER = Parser(LANGUAGE)
