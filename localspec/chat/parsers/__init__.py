"""Tool-call parsers, one per template family (see chat/families.py for the table)."""
