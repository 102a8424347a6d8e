"""scripts/o200k.py: npm tiktoken's compact ranks rebuilt into OpenAI's `.tiktoken` form, and a
rebuilt file refused unless its hash is the one expected (a synthetic table: no network)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from scripts.o200k import O200kError, rebuild, tiktoken_file_from_compact


def b64(token: bytes) -> str:
    return base64.b64encode(token).decode()


# npm's file is one such line ("! 0 …"); a table split in two counts on from its second start.
COMPACT = f"! 0 {b64(b'a')} {b64(b'b')}\n! 2 {b64(b' the')} {b64(b'ab')}\n"
EXPECTED = f"{b64(b'a')} 0\n{b64(b'b')} 1\n{b64(b' the')} 2\n{b64(b'ab')} 3\n".encode()


def test_compact_ranks_become_the_tiktoken_file_in_rank_order() -> None:
    assert tiktoken_file_from_compact(COMPACT) == EXPECTED


def test_a_rebuilt_file_is_accepted_only_with_the_expected_hash(tmp_path: Path) -> None:
    source = tmp_path / "o200k_base.json"
    source.write_text(json.dumps({"bpe_ranks": COMPACT, "pat_str": "", "special_tokens": {}}))
    assert rebuild(source, hashlib.sha256(EXPECTED).hexdigest()) == EXPECTED
    with pytest.raises(O200kError, match="SHA-256"):
        rebuild(source)  # the real o200k hash: this table is not it


def test_a_malformed_table_names_its_line(tmp_path: Path) -> None:
    source = tmp_path / "o200k_base.json"
    source.write_text(json.dumps({"bpe_ranks": COMPACT + "x notanumber YQ==\n"}))
    with pytest.raises(O200kError, match="line 3"):
        rebuild(source)
    source.write_text("{}")
    with pytest.raises(O200kError, match="not npm tiktoken's"):
        rebuild(source)
