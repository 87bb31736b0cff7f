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
    """Feed text deltas; get back what is safe to emit, and whether a stop string was hit."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.hit: str | None = None

    def push(self, text: str) -> str:
        if not self.stops:
            return text
        buf = self._held + text
        first = min(((buf.find(s), s) for s in self.stops if s in buf), default=None)
        if first is not None:
            self.hit = first[1]
            self._held = ""
            return buf[: first[0]]
        keep = 0  # longest suffix of buf that is a proper prefix of some stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:n]):
                    keep = n
                    break
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out
