"""Many agents: subagents, bots messaging each other, and the services through which tools
reach them (services.py). Above the dispatcher: this package imports it, never the reverse."""
