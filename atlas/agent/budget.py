"""The fixed cost of every request: the system prompt by section and each tool's schema."""

from __future__ import annotations

from dataclasses import dataclass

from atlas.agent.context import system_sections
from atlas.agent.tokens import count_tokens, tool_tokens
from atlas.tools.registry import RunContext, ToolRegistry


@dataclass
class Budget:
    sections: list[tuple[str, int]]
    tools: list[tuple[str, int]]
    window: int

    @property
    def total(self) -> int:
        return sum(t for _, t in self.sections) + sum(t for _, t in self.tools)


def measure(run: RunContext, registry: ToolRegistry) -> Budget:
    sections = [(name, count_tokens(text)) for name, text in system_sections(run)]
    tools = [(t.name, tool_tokens(t.spec(run))) for t in registry.for_run(run)]
    return Budget(sections, tools, run.settings.limits.context_window)


def render(budget: Budget, *, heaviest: int = 3) -> str:
    lines = [
        f"Fixed cost of every request: {budget.total:,} tokens "
        f"({budget.total / budget.window:.1%} of a {budget.window:,}-token window)",
        "System prompt:",
    ]
    lines += [f"  {name}: {tokens:,}" for name, tokens in budget.sections]
    lines.append(f"Tools ({len(budget.tools)}):")
    lines += [f"  {name}: {tokens:,}" for name, tokens in budget.tools]
    top = sorted(budget.sections + budget.tools, key=lambda item: -item[1])[:heaviest]
    lines.append("Heaviest: " + ", ".join(f"{name} ({tokens:,})" for name, tokens in top))
    return "\n".join(lines)
