"""Hermes 2 Pro / Qwen 2.5 / Qwen 3: content, then calls as
`<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>` (one block per call)."""

from __future__ import annotations

from localspec.chat.deltas import Delta
from localspec.chat.parsers.base import Parser, cut, push_all

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class Hermes(Parser):
    triggers = (OPEN,)

    def __init__(self) -> None:
        super().__init__()
        self._buf = ""
        self._state = "content"  # content | call | close | after
        self._obj = None

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        while self._buf:
            if self._state == "content":
                before, after, hit = cut(self._buf, (OPEN,))
                self.content(before)
                self._buf = after
                if hit is None:
                    break
                self._state, self._obj = "call", self.call_object()
            elif self._state == "call":
                self._buf = push_all(self._obj, self._buf)
                if not self._obj.done:
                    break
                if self._obj.name is None:  # not a call after all: it was text
                    self.content(OPEN + self._obj.raw)
                self._state = "close"
            elif self._state == "close":  # after a call: whitespace, then its closing tag
                rest = self._buf.lstrip()
                if CLOSE.startswith(rest):
                    self._buf = rest
                    break
                self._buf = rest[len(CLOSE) :] if rest.startswith(CLOSE) else rest
                self._state = "after"
            elif self._state == "after":  # whitespace between calls, or after the last, is no content
                self._buf = self._buf.lstrip()
                if not self._buf:
                    break
                self._state = "content"
        return self._take()

    def finish(self) -> list[Delta]:
        if self._state == "content":
            self.content(self._buf)
        elif self._state == "call" and self._obj.name is None:
            self.content(OPEN + self._obj.raw)
        self._buf = ""
        return self._take()
