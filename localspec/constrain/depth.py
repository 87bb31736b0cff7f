"""How deep a parsed JSON schema nests, found by a loop: everything after it recurses over the
schema (deepcopy, the number bounds, json.dumps, the grammar compiler), and a schema nested a few
hundred levels deep - 22 KB of text - made that a RecursionError. Refused first, with the limit."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 100  # objects and arrays inside one another; real schemas stay under 20


def depth_error(value: Any, what: str = "the JSON schema") -> str | None:
    """Why `value` nests too deep to take (None: it does not)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d > MAX_DEPTH:
            return too_deep(what)
        stack.extend((x, d + 1) for x in v)
    return None


def too_deep(what: str) -> str:
    return f"{what} nests objects and arrays more than {MAX_DEPTH} levels deep (the limit)"
