"""Outside coding harnesses (Claude Code, Codex) behind one interface (docs/executors.md)."""
