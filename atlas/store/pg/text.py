"""Text and queries for PostgreSQL's full-text search, split as FTS5's unicode61 splits them.

PostgreSQL's parser knows URLs, hosts, e-mail addresses and file paths and keeps each as one
token, so `example` would not find `example.com` there while FTS5 finds it. Both sides are
therefore split here first, the FTS5 way: a token is a run of letters and digits (Unicode
categories L and N), everything else separates. PostgreSQL's parser then only ever sees words
and numbers between spaces, and the `atlas_words` configuration stems them and removes accents.
"""

from __future__ import annotations

import re

from atlas.store.search import TextQuery

WORDS_CONFIG = "atlas_words"  # for snippets; matching goes through atlas_lexemes (schema.py)


def words_vector(parameter: str) -> str:
    """SQL for the tsvector of a message's split text (`words_text`) held in `parameter`."""
    return f"to_tsvector('simple', atlas_lexemes({parameter}))"


# Python's \w is letters, digits and the underscore; unicode61 separates on the underscore too.
_SEPARATORS = re.compile(r"[\W_]+")


def words_text(text: str) -> str:
    """The text as FTS5's unicode61 tokenizer splits it, tokens joined by single spaces."""
    return _SEPARATORS.sub(" ", text).strip()


def words_terms(text: str) -> list[str]:
    """Each whitespace-separated term of a person's query, split as the text was; a term with
    nothing searchable in it is dropped (as `fts_query` drops it)."""
    return [split for term in text.split() if (split := words_text(term))]


def words_tsquery(terms: list[str], first_parameter: int) -> tuple[str, list[str]]:
    """SQL for a tsquery matching every term (each a phrase: its tokens in order, adjacent,
    as FTS5 reads a quoted term), and its parameters numbered from `first_parameter`."""
    parts = [
        f"phraseto_tsquery('simple', atlas_lexemes(${first_parameter + i}))"
        for i in range(len(terms))
    ]
    return " && ".join(parts), terms


def like_pattern(term: str) -> str:
    """`term` anywhere in the text, for ILIKE (its wildcards and escape taken literally)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def substring_terms(query: TextQuery) -> list[str]:
    """What a trigram query asks for, each found anywhere in a message, case ignored: FTS5's
    trigram index matches a quoted term as a substring, and shorter terms go to LIKE."""
    return list(query.terms)
