"""What every family's parser shares: text in, deltas out; markers held back while they may still
be arriving; tool-call objects turned into numbered call deltas."""

from __future__ import annotations

from typing import Iterable

from localspec.chat.deltas import Delta, new_call_id
from localspec.chat.jsonstream import CallObject


class Parser:
    """Content only: what a family parses when no tool may be called. `names`: the declared tools'
    names, for a family whose calls may come without their markers (hermes.py)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(names)
        self.out: list[Delta] = []
        self.n_calls = 0

    def feed(self, text: str) -> list[Delta]:
        self.out.append(Delta(content=text))
        return self._take()

    def finish(self) -> list[Delta]:
        return self._take()

    def _take(self) -> list[Delta]:
        out, self.out = [d for d in self.out if not d.empty], []
        return out

    # -- helpers for the families ---------------------------------------------------------------
    def content(self, text: str) -> None:
        if text:
            self.out.append(Delta(content=text))

    def call_object(self, *, opened: bool = False) -> CallObject:
        """A call object whose name and arguments become deltas of the next tool call."""
        index = self.n_calls

        def on(kind: str, text: str) -> None:
            if kind == "name":
                self.n_calls = index + 1
                self.out.append(Delta(call=index, id=new_call_id(), name=text))
            elif kind == "arguments":
                self.out.append(Delta(call=index, arguments=text))

        return CallObject(on, opened=opened)

    def named_call(self, name: str) -> int:
        """Open a call whose name is written outside JSON (Mistral's `name[ARGS]`); its index."""
        index = self.n_calls
        self.n_calls += 1
        self.out.append(Delta(call=index, id=new_call_id(), name=name))
        return index


class StepParser(Parser):
    """A family parsed by a state machine over buffered text: `_step` moves it on, False when it
    needs more text."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        self._buf = ""

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        while self._buf and self._step():
            pass
        return self._take()

    def _step(self) -> bool:
        raise NotImplementedError


def cut(buf: str, markers: tuple[str, ...]) -> tuple[str, str, str | None]:
    """(text before the first marker, the text after it, that marker); with no marker in buf, (the
    text that cannot be the start of one, the tail that may be, None)."""
    hits = [(buf.find(m), m) for m in markers if m in buf]
    if hits:
        i, m = min(hits)
        return buf[:i], buf[i + len(m) :], m
    for k in range(min(max(map(len, markers)) - 1, len(buf)), 0, -1):
        if any(m.startswith(buf[-k:]) for m in markers):
            return buf[:-k], buf[-k:], None
    return buf, "", None


def push_all(obj, buf: str) -> str:  # noqa: ANN001 - a CallObject or a Value
    """Feed buf to obj until it refuses a character; what it did not take."""
    used = 0
    for ch in buf:
        if not obj.push(ch):
            break
        used += 1
    return buf[used:]
