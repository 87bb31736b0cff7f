"""Hermes 2 Pro / Qwen 2.5 / Qwen 3: content, then calls as
`<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>` (one block per call). Qwen2.5-Coder
often leaves the tags out: it writes the object in a ```json fence, or as the whole answer. As in
llama.cpp's Hermes parser, those are calls too - when they name a declared tool and have arguments
(tentative.py); any other fenced JSON, and any other object, stays text."""

from __future__ import annotations

from typing import Iterable

from localspec.chat.deltas import Delta
from localspec.chat.parsers.base import StepParser, cut, push_all
from localspec.chat.parsers.tentative import Tentative

OPEN, CLOSE, FENCE = "<tool_call>", "</tool_call>", "```"
_INFO = ("", "json")  # a call's fence: ``` or ```json
_MAX_INFO = 16  # a fence's info string is a word; past this, the backticks were text


class Hermes(StepParser):
    triggers = (OPEN,)

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        # lead (the answer's start, or after a call: a bare object may come) | content | call |
        # close | info (after ```) | fenced (after ```json\n) | tentative | fence_close
        self._state = "lead"
        self._called = False  # a call came before: whitespace after it is no content
        self._obj = None
        self._held = ""  # a fence's opening, held until its object is known to be a call or not
        self._tent: Tentative | None = None
        self._fence = False  # the tentative call is in a fence (its closing ``` follows it)

    def _step(self) -> bool:
        return getattr(self, "_" + self._state)()  # each state is the method of its name

    def _lead(self) -> bool:
        rest = self._buf.lstrip()
        if not rest:
            return False
        if rest[0] == "{":
            self._start_tentative(rest, lead="" if self._called else self._buf[: len(self._buf) - len(rest)])
        else:
            self._buf = rest if self._called else self._buf
            self._state = "content"
        return True

    def _content(self) -> bool:
        before, self._buf, hit = cut(self._buf, (OPEN, FENCE))
        self.content(before)
        if hit == OPEN:
            self._state, self._obj = "call", self.call_object()
        elif hit == FENCE:
            self._state, self._held = "info", FENCE
        return hit is not None

    def _call(self) -> bool:
        self._buf = push_all(self._obj, self._buf)
        if not self._obj.done:
            return False
        if self._obj.name is None:  # not a call after all: it was text
            self.content(OPEN + self._obj.raw)
            self._state = "content"
        else:
            self._state = "close"
        return True

    def _close(self) -> bool:  # after a call: whitespace, then its closing tag
        rest = self._buf.lstrip()
        if CLOSE.startswith(rest):
            self._buf = rest
            return False
        self._buf = rest[len(CLOSE) :] if rest.startswith(CLOSE) else rest
        self._state, self._called = "lead", True
        return True

    def _info(self) -> bool:  # after ```: the info string, up to its newline
        line, nl, rest = self._buf.partition("\n")
        if not nl:
            word = line.strip()
            if len(line) <= _MAX_INFO and (word.isalnum() or not word):
                return False  # still may be a call's fence
            return self._text_after_all()
        if line.strip().lower() not in _INFO:
            return self._text_after_all()
        self._held += line + nl
        self._buf, self._state = rest, "fenced"
        return True

    def _fenced(self) -> bool:  # after ```json\n: whitespace, then an object, or it is a code block
        rest = self._buf.lstrip()
        self._held += self._buf[: len(self._buf) - len(rest)]
        self._buf = rest
        if not rest:
            return False
        if rest[0] != "{":
            return self._text_after_all()
        self._start_tentative(rest, lead=self._held)
        return True

    def _start_tentative(self, buf: str, lead: str) -> None:
        self._tent, self._state, self._held = Tentative(self, lead, self.names), "tentative", ""
        self._fence = lead.lstrip().startswith(FENCE)
        self._buf = buf

    def _tentative(self) -> bool:
        t = self._tent
        self._buf = t.feed(self._buf)
        if not t.settled:
            return False
        if not t.committed:
            self.content(t.text)
            self._state = "content"
        else:
            self._state = "fence_close" if self._fence else "lead"
            self._called = True
        return True

    def _fence_close(self) -> bool:  # after a fenced call: whitespace, then the closing ```
        rest = self._buf.lstrip()
        if FENCE.startswith(rest):
            self._buf = rest
            return False
        self._buf = rest[len(FENCE) :] if rest.startswith(FENCE) else rest
        self._state = "lead"
        return True

    def _text_after_all(self) -> bool:
        """What was held for a fence is text; what follows is read as content again."""
        self.content(self._held)
        self._held, self._state = "", "content"
        return True

    def finish(self) -> list[Delta]:
        s = self._state
        if s == "content" or (s == "lead" and not self._called):
            self.content(self._buf)
        elif s == "call" and self._obj.name is None:
            self.content(OPEN + self._obj.raw)
        elif s in ("info", "fenced"):
            self.content(self._held + self._buf)
        elif s == "tentative" and not self._tent.committed:  # a call cut short stays a call
            self.content(self._tent.text + self._buf)
        self._buf = ""
        return self._take()
