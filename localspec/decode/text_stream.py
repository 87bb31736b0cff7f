"""Tokens -> text deltas: UTF-8-safe detokenizing, stop strings and EOG, independent of any model.

`TextStream.feed` takes steps as the decoding rounds make them and returns the text they complete;
once the output is decided (EOG or a stop string) it takes no more, and the steps made after that
are in `dropped` (the EOG that decided it is generated, not dropped). When a stop string ends the
text, the tokens that only made up the stop string (or came after it) are dropped too, so text,
tokens and counters agree.

Code completion's two stops end the text as llama-server's do (finish "length", its limit):
`n_indent` where a line after a newline starts, at its first character, indented less than that
(the text keeps the newline and the indentation); `t_max_predict_ms` at the first piece holding a
newline once generating has taken that long (the piece is kept).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from localspec.decode.detok import Detokenizer, StopMatcher
from localspec.decode.state import Step


class TextStream:
    def __init__(
        self,
        token_bytes: Callable[[int], bytes],
        is_eog: Callable[[int], bool],
        stop: Sequence[str] = (),
        *,
        n_indent: int = 0,
        t_max_predict_ms: int = 0,
    ) -> None:
        self._detok = Detokenizer(token_bytes)
        self._stops = StopMatcher(stop)
        self._code = CodeStops(n_indent, t_max_predict_ms)
        self._is_eog = is_eog
        self.tokens: list[int] = []  # emitted tokens (EOG excluded)
        self.dropped: list[Step] = []  # steps made after the output was decided (stop string, EOG)
        self.finish = "length"
        self.saw_eog = False
        self.done = False  # the output is decided: feed() takes nothing more
        self.first_token_at: float | None = None
        self._pending: list[Step] = []  # steps whose text is not out yet
        self._decoded = 0  # characters decoded so far (emitted text is always a prefix of them)
        self._emitted = 0  # characters emitted so far
        self._starts: list[int] = []  # per emitted token: decoded characters before it

    def feed(
        self, steps: Iterable[Step], clock: Callable[[], float] | None = None
    ) -> list[tuple[str, list[Step]]]:
        """Text deltas and the steps they carry. A delta's steps may carry no text yet (held-back bytes)."""
        out: list[tuple[str, list[Step]]] = []
        for step in steps:
            if self.done:
                self.dropped.append(step)
                continue
            if self.first_token_at is None and clock is not None:
                self.first_token_at = clock()
            if self._is_eog(step.token):
                # generated (n_generated counts it) though never shown: not dropped, so an accepted
                # EOG draft stays accepted
                self.finish, self.saw_eog, self.done = "stop", True, True
                continue
            self.tokens.append(step.token)
            self._starts.append(self._decoded)
            self._pending.append(step)
            piece = self._detok.push(step.token)
            self._decoded += len(piece)
            delta = self._stops.push(piece)
            cut = self._code.indent_cut(delta)
            if cut is not None:
                delta = delta[:cut]
            self._emitted += len(delta)
            if self._stops.hit is not None or cut is not None:
                self.finish, self.done = "stop" if cut is None else "length", True
                out.append((delta, self._cut_at_stop()))
            elif delta:
                out.append((delta, self._pending))
                self._pending = []
                # finish stays "length": llama-server's limit
                self.done = self._code.late(delta, self.first_token_at, clock)
        return out

    @property
    def stop_hit(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return self._stops.hit

    def _cut_at_stop(self) -> list[Step]:
        """Drop the tokens that start at or after the stop string (they add no emitted text)."""
        keep = sum(1 for s in self._starts if s < self._emitted)
        n_cut = min(len(self.tokens) - keep, len(self._pending))
        keep = len(self.tokens) - n_cut
        cut = self._pending[len(self._pending) - n_cut :] if n_cut else []
        kept = self._pending[: len(self._pending) - n_cut]
        self.dropped.extend(cut)
        del self.tokens[keep:]
        del self._starts[keep:]
        self._pending = []
        return kept

    def close(self) -> list[tuple[str, list[Step]]]:
        """The end of the steps: flush held-back text."""
        if self._stops.hit is not None or self._code.cut:
            return []
        tail = self._stops.push(self._detok.flush())
        if self._stops.hit is not None:
            self.finish = "stop"
            return [(tail, self._cut_at_stop())]
        tail += self._stops.flush()
        pending, self._pending = self._pending, []
        return [(tail, pending)] if tail or pending else []


class CodeStops:
    """The code completion stops (llama-server's n_indent and t_max_predict_ms); 0 turns one off."""

    def __init__(self, n_indent: int = 0, t_max_predict_ms: int = 0) -> None:
        self._indent = Indent(n_indent) if n_indent > 0 else None
        self._t_max_s = t_max_predict_ms / 1e3
        self.cut = False  # the indentation ended the text: nothing held back comes out

    def indent_cut(self, text: str) -> int | None:
        """Where the next emitted `text` ends the output, or None."""
        at = self._indent.push(text) if self._indent is not None else None
        self.cut |= at is not None
        return at

    def late(self, text: str, first_at: float | None, clock: Callable[[], float] | None) -> bool:
        """Emitted `text` holds a newline after the time limit: the output ends with it."""
        if not self._t_max_s or "\n" not in text or clock is None or first_at is None:
            return False
        return clock() - first_at > self._t_max_s


class Indent:
    """llama-server's n_indent: the first line start (after a newline in the text) whose indentation
    (spaces and tabs) is less than n at its first other character."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._at: int | None = None  # the current line's indentation so far; None: not at a line start

    def push(self, text: str) -> int | None:
        """Where in `text` the output ends, or None."""
        for i, ch in enumerate(text):
            if ch == "\n":
                self._at = 0
            elif self._at is not None:
                if ch in " \t":
                    self._at += 1
                elif self._at < self.n:
                    return i
                else:
                    self._at = None
        return None
