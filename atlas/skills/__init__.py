"""Skills: folders of instructions (SKILL.md) a bot loads when a task matches them."""
