"""JSON read a character at a time, for answers that arrive a token at a time: where a value ends,
a string's text as it is decoded, and a tool-call object (`{"name": ..., "arguments": {...}}`) whose
name is known once and whose arguments come out in pieces as they are generated."""

from __future__ import annotations

import json
from typing import Callable

_WS = " \t\r\n"


class Value:
    """Follows one JSON value; `push(ch)` says whether ch belongs to it. Leading whitespace is taken
    (and not part of the value); a number or literal ends at the first character that is not its
    own, which push() then refuses."""

    def __init__(self) -> None:
        self.depth = 0
        self.started = False
        self.done = False
        self.first = ""  # the value's first character: { [ " or a scalar's
        self._str = self._esc = False

    def push(self, ch: str) -> bool:
        if self.done:
            return False
        if not self.started:
            if ch in _WS:
                return True
            self.started, self.first = True, ch
            if ch in "{[":
                self.depth = 1
            elif ch == '"':
                self._str = True
            elif ch in ",:}]":  # not a value at all: refused, and done so the caller moves on
                self.done = True
                return False
            return True
        if self._str:
            if self._esc:
                self._esc = False
            elif ch == "\\":
                self._esc = True
            elif ch == '"':
                self._str = False
                self.done = self.depth == 0
            return True
        if self.first not in '{["':  # a number, true, false, null
            if ch in _WS + ",}]":
                self.done = True
                return False
            return True
        if ch == '"':
            self._str = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            self.done = self.depth == 0
        return True


class StringText:
    """The text of a JSON string as it is decoded (escapes, surrogate pairs), after its opening
    quote; `push(ch)` returns the text ch completes and sets `done` at the closing quote."""

    def __init__(self) -> None:
        self.done = False
        self._esc = ""  # an escape being read: "\\", "\\u12", ...
        self._high = ""  # a high surrogate's escape, waiting for its pair

    def push(self, ch: str) -> str:
        if self._esc:
            self._esc += ch
            if self._esc[1] == "u" and len(self._esc) < 6:
                return ""
            esc, self._esc = self._esc, ""
            return self._escape(esc)
        if ch == "\\":
            self._esc = ch
            return ""
        if ch == '"':
            self.done = True
            return self._lone()
        return self._lone() + ch

    def _escape(self, esc: str) -> str:
        try:
            if esc[1] == "u":
                cp = int(esc[2:], 16)
                if 0xD800 <= cp < 0xDC00:
                    lone, self._high = self._lone(), esc
                    return lone
                if self._high and 0xDC00 <= cp < 0xE000:
                    high, self._high = self._high, ""
                    return json.loads(f'"{high}{esc}"')
                if 0xDC00 <= cp < 0xE000:
                    return self._lone() + "\ufffd"
            return self._lone() + json.loads(f'"{esc}"')
        except ValueError:  # not an escape JSON has: kept as written
            return self._lone() + esc

    def _lone(self) -> str:
        """A high surrogate with no low one after it: the replacement character."""
        if self._high:
            self._high = ""
            return "\ufffd"
        return ""


NAME_KEYS = ("name", "tool_name")
ARG_KEYS = ("arguments", "parameters")


class CallObject:
    """One tool call written as a JSON object, read after its opening brace has been seen (or
    from its start, `opened=False`). Calls on(kind, text): ("name", name) once, ("arguments", piece)
    as the arguments' JSON text arrives (held until the name is known), ("id", id) for a
    model-written id. `done` when the object closes; `name` is None if it had none (not a call)."""

    def __init__(self, on: Callable[[str, str], None], *, opened: bool = True) -> None:
        self._on = on
        self._state = "key" if opened else "open"
        self.done = False
        self.name: str | None = None
        self.raw = "{" if opened else ""  # everything read, for an object that turns out not to be a call
        self._key = ""
        self._keytext: StringText | None = None
        self._val: Value | None = None
        self._valtext = ""
        self._held = ""  # arguments read before the name
        self.args_seen = False
        self._string_args = False  # arguments written as a JSON string of JSON (decoded at its end)

    def push(self, ch: str) -> bool:
        """Take ch; False if it is past the end of the object (the caller keeps it)."""
        if self.done:
            return False
        if self._state == "value":
            if self._value(ch):
                self.raw += ch
                return True
            self._state = "key"  # a number or literal ended at ch: ch is a comma or the closing brace
        self.raw += ch
        if self._state == "open":
            if ch == "{":
                self._state = "key"
            return True
        if self._state == "key":
            if ch == '"':
                self._keytext, self._key, self._state = StringText(), "", "keystr"
            elif ch == "}":
                self._end()
            return True
        if self._state == "keystr":
            self._key += self._keytext.push(ch)
            if self._keytext.done:
                self._state = "colon"
            return True
        if self._state == "colon":
            if ch == ":":
                self._state, self._val, self._valtext = "value", Value(), ""
            return True
        return True

    def _value(self, ch: str) -> bool:
        if not self._val.push(ch):
            self._close_value()
            return False
        if self._val.started:
            self._valtext += ch
            if self._key in ARG_KEYS and not self.args_seen:
                self._args(ch)
        if self._val.done:
            self._close_value()
            self._state = "key"
        return True

    def _args(self, ch: str) -> None:
        if self._valtext == ch and ch == '"':
            self._string_args = True
        if self._string_args:
            return
        if self.name is None:
            self._held += ch
        else:
            self._on("arguments", ch)

    def _close_value(self) -> None:
        key, text = self._key, self._valtext.strip()
        if key in NAME_KEYS and self.name is None and text.startswith('"'):
            try:
                self.name = json.loads(text)
            except ValueError:
                return
            self._on("name", self.name)
            if self._held:
                self._on("arguments", self._held)
                self._held = ""
        elif key in ARG_KEYS and not self.args_seen:
            self.args_seen = True
            if self._string_args:
                try:
                    decoded = json.loads(text)
                except ValueError:
                    decoded = text
                self._held += decoded if isinstance(decoded, str) else json.dumps(decoded)
                self._string_args = False
                if self.name is not None:
                    self._on("arguments", self._held)
                    self._held = ""
        elif key == "id" and text.startswith('"'):
            try:
                self._on("id", json.loads(text))
            except ValueError:
                pass

    def _end(self) -> None:
        self.done = True
        if self.name is not None and not self.args_seen:
            self._on("arguments", "{}")
