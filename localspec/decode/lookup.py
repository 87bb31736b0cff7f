"""Drafts for free: propose the continuation of the longest recent match of the sequence's own suffix.

Text that copies (an edited function, a re-emitted table, a quoted passage, a loop) repeats runs of
tokens already in the prompt or the output. An n-gram index maps every n-gram (n <= N_MAX) to where
its most recent occurrence ended; the longest suffix n-gram found there marks a match, which is then
measured backwards (up to MATCH_CAP tokens) for its confidence, and its continuation is the proposal.
Adding a token costs N_MAX dictionary updates, whatever the sequence's length (llama.cpp's
ngram-simple, vLLM's n-gram proposer and prompt-lookup decoding work the same way).
"""

from __future__ import annotations

from typing import Sequence

N_MAX = 4  # longest n-gram indexed; longer matches are found by comparing backwards from one
N_MIN = 2  # a single shared token says too little to propose anything
MATCH_CAP = 32  # matches are measured up to this many tokens (confidence saturates long before)


class Lookup:
    """An incremental n-gram index over one sequence's tokens (prompt + output so far)."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self.tokens: list[int] = []
        # (n-gram) -> the position right after its most recent occurrence that has a continuation
        self._index: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, new: Sequence[int]) -> None:
        toks = self.tokens
        index = self._index
        for t in new:
            toks.append(int(t))
            end = len(toks) - 1  # the n-grams ending just before the new token now have a continuation
            for n in range(1, min(N_MAX, end) + 1):
                index[tuple(toks[end - n : end])] = end

    def match(self) -> tuple[int, int]:
        """(where the continuation of the longest recent suffix match starts, the match's length);
        (-1, 0) when not even N_MIN tokens recur."""
        toks = self.tokens
        size = len(toks)
        for n in range(min(N_MAX, size - 1), N_MIN - 1, -1):
            start = self._index.get(tuple(toks[size - n :]))
            if start is None:
                continue
            length = n
            while (
                length < MATCH_CAP and length < start and toks[start - length - 1] == toks[size - length - 1]
            ):
                length += 1
            return start, length
        return -1, 0

    def propose(self, k: int) -> tuple[list[int], int]:
        """Up to k tokens continuing the best match, and the match length (0: no proposal). A match
        that runs into the sequence's end (a loop) continues periodically, as the loop would."""
        start, length = self.match()
        if start < 0 or k <= 0:
            return [], 0
        toks = self.tokens
        period = len(toks) - start
        out = [toks[start + (i % period)] for i in range(k)]
        cut = next((i for i, t in enumerate(out) if t < 0), len(out))  # an image's ids: no text to propose
        return (out[:cut], length) if cut else ([], 0)
