"""Templates that know no tools (SmolLM2, Gemma 3, ...), as llama.cpp does for them: the answer is
one JSON object, `{"tool_call": {"name": "f", "arguments": {...}}}`, `{"tool_calls": [...]}` or
`{"response": "text"}` (the prompt asks for it; the constraint makes it so). The response's text
streams as content while it is decoded. An answer that is not such an object is content."""

from __future__ import annotations

from typing import Iterable

from localspec.chat.deltas import Delta
from localspec.chat.jsonstream import StringText, Value
from localspec.chat.parsers.base import Parser, push_all


class Generic(Parser):
    triggers = ("{",)

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        self._buf = ""
        self._raw = ""  # everything read: an answer that turns out not to be the format is content
        self._state = "start"  # start | key | keystr | colon | value | text | call | calls | done | content
        self._key = ""
        self._keytext: StringText | None = None
        self._val: Value | StringText | None = None
        self._obj = None
        self._emitted = False

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        self._raw += text
        while self._buf and self._step():
            pass
        return self._take()

    def _step(self) -> bool:
        s, buf = self._state, self._buf
        if s == "content":
            self.content(buf)
            self._buf = ""
            return False
        if s == "done":
            self._buf = ""
            return False
        if s in ("start", "key", "colon"):
            buf = buf.lstrip()
            if not buf:
                self._buf = ""
                return False
            ch, self._buf = buf[0], buf[1:]
            if s == "start":
                self._state = "key" if ch == "{" else "content"
                if ch != "{":
                    self._buf = buf
            elif s == "key":
                if ch == '"':
                    self._state, self._key, self._keytext = "keystr", "", StringText()
                elif ch == "}":
                    self._state = "done"
            elif ch == ":":
                self._state = "value"
            return True
        if s == "keystr":
            while self._buf and not self._keytext.done:
                self._key += self._keytext.push(self._buf[0])
                self._buf = self._buf[1:]
            if self._keytext.done:
                self._state = "colon"
            return self._keytext.done
        if s == "value":
            buf = buf.lstrip()
            self._buf = buf
            if not buf:
                return False
            if self._key == "response" and buf[0] == '"':
                self._buf, self._state, self._val = buf[1:], "text", StringText()
            elif self._key == "tool_call":
                self._state, self._obj = "call", self.call_object()
            elif self._key == "tool_calls" and buf[0] == "[":
                self._buf, self._state = buf[1:], "calls"
            else:  # another key, or a response that is not a string (a JSON schema's answer): as JSON text
                self._state, self._val = "json", Value()
            return True
        if s == "text":
            while self._buf and not self._val.done:
                piece = self._val.push(self._buf[0])
                self._buf = self._buf[1:]
                if piece:
                    self._emitted = True
                    self.content(piece)
            if self._val.done:
                self._state = "key"
            return self._val.done
        if s == "json":
            used = 0
            for ch in self._buf:
                if not self._val.push(ch):
                    break
                used += 1
                if self._key == "response" and self._val.started:
                    self._emitted = True
                    self.content(ch)
            self._buf = self._buf[used:]
            if self._val.done:
                self._state = "key"
            return self._val.done
        if s == "call":
            self._buf = push_all(self._obj, self._buf)
            if self._obj.done:
                self._emitted = self._emitted or self._obj.name is not None
                self._state = "calls" if self._key == "tool_calls" else "key"
            return self._obj.done
        # calls: between the items of the tool_calls array
        buf = buf.lstrip(" \t\r\n,")
        self._buf = buf
        if not buf:
            return False
        if buf[0] == "]":
            self._buf, self._state = buf[1:], "key"
        else:
            self._state, self._obj = "call", self.call_object()
        return True

    def finish(self) -> list[Delta]:
        if self._state == "content":
            self.content(self._buf)
        elif not self._emitted and self.n_calls == 0:  # not the format after all: the text as it was
            # (nothing of it went out: content streams only from a response or a non-JSON start)
            self.out = [Delta(content=self._raw)]
        self._buf = ""
        return self._take()
