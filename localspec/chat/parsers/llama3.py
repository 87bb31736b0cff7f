"""Llama 3.1 / 3.2 / 3.3: a call is the whole answer, a JSON object written first -
`{"name": "f", "parameters": {...}}` (several, separated by `;` or newlines) - or, for the built-in
tools, `<|python_tag|>brave_search.call(query="...")`; `<|python_tag|>` may also lead a JSON call.
An answer that does not open with `{` or the tag is content."""

from __future__ import annotations

import json
import re
from typing import Iterable

from localspec.chat.deltas import Delta
from localspec.chat.parsers.base import StepParser, push_all

TAG = "<|python_tag|>"
_BUILTIN = re.compile(r"\s*(\w+)\s*\.\s*call\((.*)\)\s*$", re.S)
_ARG = re.compile(r"\s*(\w+)\s*=\s*")


class Llama3(StepParser):
    triggers = ("{", TAG)

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        self._state = "start"  # start | call | between | builtin | content
        self._obj = None

    def _step(self) -> bool:
        s = self._state
        if s == "content":
            self.content(self._buf)
            self._buf = ""
            return False
        if s in ("start", "between"):
            rest = self._buf.lstrip(" \t\r\n;" if s == "between" else " \t\r\n")
            if not rest or (TAG.startswith(rest) and rest != TAG):
                return False  # not yet known
            if rest.startswith(TAG):
                self._buf, self._state = rest[len(TAG) :].lstrip(), "tagged"
            elif rest[0] == "{":
                self._buf, self._state, self._obj = rest, "call", self.call_object()
            else:
                self._state = "content"
                if s == "between":  # text after the calls
                    self._buf = rest
            return True
        if s == "tagged":
            if not self._buf:
                return False
            if self._buf[0] == "{":
                self._state, self._obj = "call", self.call_object()
            else:
                self._state = "builtin"
            return True
        if s == "call":
            self._buf = push_all(self._obj, self._buf)
            if not self._obj.done:
                return False
            if self._obj.name is None:  # JSON that is no call: the answer is content
                self.content(self._obj.raw)
                self._state = "content"
            else:
                self._state = "between"
            return True
        return False  # builtin: read whole at the end (its arguments are not JSON text)

    def finish(self) -> list[Delta]:
        if self._state == "builtin":
            self._builtin(self._buf)
        elif self._state == "call" and self._obj.name is None:
            self.content(self._obj.raw)
        elif self._state in ("content", "start"):
            self.content(self._buf)
        self._buf = ""
        return self._take()

    def _builtin(self, text: str) -> None:
        """`name.call(k=v, ...)` with JSON values -> a call with arguments {k: v}; else content."""
        m = _BUILTIN.match(text)
        args: dict = {}
        rest = m.group(2) if m else ""
        dec = json.JSONDecoder()
        while m and rest.strip():
            a = _ARG.match(rest)
            if not a:
                m = None
                break
            try:
                value, end = dec.raw_decode(rest, a.end())
            except ValueError:
                m = None
                break
            args[a.group(1)] = value
            rest = rest[end:].lstrip()
            rest = rest[1:] if rest.startswith(",") else rest
        if m is None:
            self.content(TAG + text)
            return
        index = self.named_call(m.group(1))
        self.out.append(Delta(call=index, arguments=json.dumps(args, ensure_ascii=False)))
