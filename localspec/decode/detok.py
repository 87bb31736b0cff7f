"""Streaming text out of tokens: UTF-8-safe pieces and stop strings.

A multi-byte character can be split across tokens (emoji, CJK in byte-level BPE), so token bytes go
through an incremental UTF-8 decoder that holds incomplete sequences back. Stop strings can span
tokens, so text that might be the start of a stop string is held back until it is decided.
"""

from __future__ import annotations

import codecs
from typing import Callable, Sequence


class Detokenizer:
    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """Text completed by this token (possibly empty)."""
        return self._dec.decode(self._token_bytes(token))

    def flush(self) -> str:
        """End of the stream. Bytes still held are a character the last token left incomplete (max_tokens
        cut it off): dropped, not shown as U+FFFD."""
        self._dec.reset()
        return ""


class StopMatcher:
    """Feed text deltas; get back what is safe to emit, and whether a stop string was hit.

    Each stop string keeps a Knuth-Morris-Pratt state: the length of the longest suffix of the text
    so far that is a prefix of it. A push costs O(len(text)) per stop string, however long the stop
    strings are (16 of 4,096 characters are allowed): the held-back text is the longest such prefix.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._fail = [_failure(s) for s in self.stops]
        self._state = [0] * len(self.stops)
        self._held = ""
        self.hit: str | None = None

    def push(self, text: str) -> str:
        if not self.stops:
            return text
        buf = self._held + text
        first: tuple[int, str] | None = None  # the stop string that starts earliest in buf
        for j, s in enumerate(self.stops):
            end = self._advance(j, text)
            if end is not None:
                at = (len(self._held) + end - len(s), s)
                first = at if first is None or at < first else first
        if first is not None:
            self.hit = first[1]
            self._held = ""
            return buf[: first[0]]
        keep = max(self._state)  # < len(s) for each: a proper prefix of some stop string
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def _advance(self, j: int, text: str) -> int | None:
        """Run stop string j's automaton over text; where in text it first completes, if it does."""
        s, fail, k = self.stops[j], self._fail[j], self._state[j]
        for i, ch in enumerate(text):
            while k and s[k] != ch:
                k = fail[k - 1]
            if s[k] == ch:
                k += 1
                if k == len(s):
                    self._state[j] = k
                    return i + 1
        self._state[j] = k
        return None

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out


def _failure(s: str) -> list[int]:
    """KMP's failure table: f[i] = the length of the longest proper prefix of s[:i + 1] that is
    also its suffix."""
    f = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = f[k - 1]
        if s[i] == s[k]:
            k += 1
        f[i] = k
    return f
