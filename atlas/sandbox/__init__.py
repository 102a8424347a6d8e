"""Containment: the bubblewrap sandbox every command runs in (launcher, policy, commands) and the
egress proxy that is its only way out (proxy). See docs/sandbox.md."""
