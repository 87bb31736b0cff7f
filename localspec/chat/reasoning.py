"""Reasoning models (Qwen 3, DeepSeek-R1 and its distills, ...) think first, in `<think>...</think>`.
`Reasoning` splits that off an answer's start into reasoning deltas and hands the rest to the
family's parser; a prompt that already opened the block (`...<think>\\n`) starts inside it. With
reasoning_format "none" nothing is split: the thinking stays in the content, as written."""

from __future__ import annotations

from localspec.chat.deltas import Delta
from localspec.chat.parsers.base import Parser, cut

OPEN, CLOSE = "<think>", "</think>"


def has_reasoning(template: str | None) -> bool:
    """The template knows a thinking block (it writes or strips one)."""
    return bool(template) and CLOSE in template


def opened_by_prompt(prompt: str) -> bool:
    """The rendered prompt ends inside an open thinking block (DeepSeek-R1's templates do)."""
    tail = prompt.rstrip()
    return tail.endswith(OPEN)


class Reasoning:
    """A parser (feed / finish) that splits the thinking off and hands the rest to `inner`."""

    def __init__(self, inner: Parser, *, opened: bool = False) -> None:
        self.inner = inner
        self.out: list[Delta] = []
        self._buf = ""
        self._state = "think" if opened else "start"  # start | think | strip | rest

    @property
    def n_calls(self) -> int:
        return self.inner.n_calls

    def _take(self) -> list[Delta]:
        out, self.out = [d for d in self.out if not d.empty], []
        return out

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        while self._buf:
            if self._state == "rest":
                self.out += self.inner.feed(self._buf)
                self._buf = ""
            elif self._state == "start":
                rest = self._buf.lstrip()
                if OPEN.startswith(rest):  # only whitespace so far, or the tag arriving
                    break
                if rest.startswith(OPEN):
                    self._buf, self._state = rest[len(OPEN) :], "think"
                else:
                    self._state = "rest"
            elif self._state == "think":
                before, self._buf, hit = cut(self._buf, (CLOSE,))
                if before:
                    self.out.append(Delta(reasoning=before))
                if hit is None:
                    break
                self._state = "strip"
            else:  # the whitespace between the thinking and the answer is neither
                self._buf = self._buf.lstrip()
                if self._buf:
                    self._state = "rest"
        return self._take()

    def finish(self) -> list[Delta]:
        if self._state == "think" and self._buf:
            self.out.append(Delta(reasoning=self._buf))
        elif self._state in ("start", "rest") and self._buf:
            self.out += self.inner.feed(self._buf)
        self._buf = ""
        self.out += self.inner.finish()
        return self._take()
