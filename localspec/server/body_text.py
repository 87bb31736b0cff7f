"""A JSON body's text must be Unicode. JSON can escape half of a surrogate pair on its own
("ab\\ud800cd"): valid JSON, and Python decodes it to a str that no UTF-8 encoder (llama.cpp's
tokenizer, a grammar compiler, a template) will take. Refused once, for every route and dialect,
where the body is read (app.BodyLimit), with the path of the first such string."""

from __future__ import annotations

import json
import re
from typing import Any

# the start of a surrogate's escape (\uD800-\uDFFF): real bodies rarely hold one, so most are not parsed
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate(body: bytes) -> str | None:
    """Where a JSON body holds a string (or a key) with a lone surrogate - a dotted path, "body" for
    the whole - or None. Bodies that are not JSON are left to the route to refuse."""
    if not _ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # a loop, not recursion: any depth json.loads gave back
        path, v = stack.pop()
        if isinstance(v, str):
            if not _is_text(v):
                return path.rstrip(".") or "body"
        elif isinstance(v, dict):
            for k, x in v.items():
                if not _is_text(k):
                    return f"{path}{k!a}".rstrip(".")
                stack.append((f"{path}{k}.", x))
        elif isinstance(v, list):
            stack.extend((f"{path}{i}.", x) for i, x in reversed(list(enumerate(v))))
    return None


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")  # a pair was joined by json.loads: what is left is alone
    except UnicodeEncodeError:
        return False
    return True
