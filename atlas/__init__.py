"""Atlas: a self-hosted home of agent bots."""
