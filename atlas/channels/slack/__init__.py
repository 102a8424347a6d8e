"""Slack (slack-bolt): the channel (channel.py) and its layers, one module each."""
