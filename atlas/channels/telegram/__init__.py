"""Telegram (aiogram): the channel (channel.py) and its layers, one module each."""
