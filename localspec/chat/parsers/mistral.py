"""Mistral: content, then `[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}, ...]`
(Nemo, Small 3.x), or `[TOOL_CALLS]f[ARGS]{...}` (the v11 tokenizer's form; `[CALL_ID]id` may come
before `[ARGS]`), a `[TOOL_CALLS]` per call."""

from __future__ import annotations

from typing import Iterable

from localspec.chat.deltas import Delta
from localspec.chat.jsonstream import Value
from localspec.chat.parsers.base import StepParser, cut, push_all

OPEN, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


class Mistral(StepParser):
    triggers = (OPEN,)

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        self._state = "content"  # content | after | array | item | name | args
        self._obj = None
        self._val: Value | None = None
        self._index = 0

    def _step(self) -> bool:
        """Advance through buf; False when it needs more text."""
        s = self._state
        if s == "content":
            before, self._buf, hit = cut(self._buf, (OPEN,))
            self.content(before)
            if hit is None:
                return False
            self._state = "after"
        elif s == "after":  # right after [TOOL_CALLS]: an array, or a name
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
            self._state = "array" if self._buf[0] == "[" else "name"
            if self._state == "array":
                self._buf = self._buf[1:]
        elif s == "array":  # between items: whitespace, commas, the closing bracket
            self._buf = self._buf.lstrip(" \t\r\n,")
            if not self._buf:
                return False
            if self._buf[0] == "]":
                self._buf, self._state = self._buf[1:], "content"
            else:
                self._obj, self._state = self.call_object(), "item"
        elif s == "item":
            self._buf = push_all(self._obj, self._buf)
            if not self._obj.done:
                return False
            self._state = "array"
        elif s == "name":
            before, after, hit = cut(self._buf, (ARGS, CALL_ID))
            if hit is None:
                return False
            if hit == ARGS:
                self._index = self.named_call(before.strip())
                self._buf, self._state, self._val = after, "args", Value()
            else:  # [CALL_ID]id[ARGS]: the id is the model's; ours is the one the client sees
                self._buf, self._name = after, before.strip()
                self._state = "call_id"
        elif s == "call_id":
            _, after, hit = cut(self._buf, (ARGS,))
            if hit is None:
                return False
            self._index = self.named_call(self._name)
            self._buf, self._state, self._val = after, "args", Value()
        elif s == "args":
            used = 0
            for ch in self._buf:
                if not self._val.push(ch):
                    break
                used += 1
                if self._val.started:
                    self.out.append(Delta(call=self._index, arguments=ch))
            self._buf = self._buf[used:]
            if not self._val.done:
                return False
            self._state = "content"
        return True

    def finish(self) -> list[Delta]:
        if self._state == "content":
            self.content(self._buf)
        self._buf = ""
        return self._take()
