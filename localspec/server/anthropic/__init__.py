"""Anthropic's dialect: the Messages API (messages.py) and its model list (models.py)."""
