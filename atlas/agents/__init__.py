"""Many agents: subagents, bots messaging each other, new bots."""
