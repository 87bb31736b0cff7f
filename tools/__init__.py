"""Supported tools, run by make targets (each is also a script: python tools/NAME.py)."""
