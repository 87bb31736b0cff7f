"""What this model has read and written across requests, as an index drafts can come from (vLLM's
suffix decoding, llama.cpp's ngram-cache): agents resend the same tools and system prompt and
re-emit the same edits, editors re-type near-identical completions, JSON answers share their keys.

Each finished sequence (prompt + output) is kept whole; an n-gram index maps every n-gram (n <=
N_MAX) to where its most recent occurrence in the kept text ended, and each kept token notes whether
its context (the N_MAX tokens before it) went on with it the time before. A sequence's own suffix is
looked up longest first, the match measured backwards for its confidence (as decode/lookup.py does
within one sequence), and its continuation proposed as far as the history agrees with itself: a
context every request shares (a chat template's turn markers, `<|im_end|>\n<|im_start|>assistant\n`)
is followed by whatever each answer began with, and the latest one predicts the next no better than
chance (llama.cpp's ngram-cache and vLLM's suffix decoding score a continuation by how often it
followed too). Memory is bounded: past `cap` tokens the oldest sequences go, and their index entries
with them.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from localspec.decode.lookup import MATCH_CAP, N_MAX, N_MIN


class History:
    """A bounded n-gram index over whole recent sequences of one model."""

    def __init__(self, cap: int) -> None:
        self.cap = cap  # tokens kept at most
        self.size = 0
        self._docs: deque[tuple[int, list[int]]] = deque()  # (id, tokens), oldest first
        # id -> (tokens, per token: whether the N_MAX tokens before it went on with it the time before)
        self._by_id: dict[int, tuple[list[int], bytearray]] = {}
        self._next = 0
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> (doc id, its end)

    def __len__(self) -> int:
        return len(self._docs)

    def add(self, tokens: Sequence[int]) -> None:
        """Keep a finished sequence (the most recent occurrence of an n-gram wins; each token notes
        whether its context's occurrence before went on with it), then drop the oldest ones past
        the cap. A sequence longer than the cap keeps its last cap tokens."""
        toks = [int(t) for t in tokens[-self.cap :]] if self.cap > 0 else []
        if len(toks) < N_MIN + 1:
            return
        doc, self._next = self._next, self._next + 1
        self._docs.append((doc, toks))
        agrees = bytearray(len(toks))
        self._by_id[doc] = (toks, agrees)
        self.size += len(toks)
        index, by_id = self._index, self._by_id
        for end in range(1, len(toks)):  # the n-grams ending before `end` have a continuation there
            top = min(N_MAX, end)
            was = index.get(tuple(toks[end - top : end]))  # the most specific context, the time before
            agrees[end] = was is None or by_id[was[0]][0][was[1]] == toks[end]
            for n in range(1, top + 1):
                index[tuple(toks[end - n : end])] = (doc, end)
        while self.size > self.cap:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        doc, toks = self._docs.popleft()
        del self._by_id[doc]
        self.size -= len(toks)
        index = self._index
        for end in range(1, len(toks)):
            for n in range(1, min(N_MAX, end) + 1):
                key = tuple(toks[end - n : end])
                if index.get(key, (None,))[0] == doc:  # not overwritten by a later occurrence
                    del index[key]

    def propose(self, tokens: Sequence[int], k: int) -> tuple[list[int], int]:
        """Up to k tokens continuing the longest recent match of `tokens`' suffix in the kept
        sequences, and the match's length (0: none). The proposal ends where the history
        contradicts itself (a token whose context went on otherwise the time before: none at all
        where the first one does) or at an image's ids (negative)."""
        size = len(tokens)
        for n in range(min(N_MAX, size), N_MIN - 1, -1):
            hit = self._index.get(tuple(tokens[size - n :]))
            if hit is None:
                continue
            doc, agrees = self._by_id[hit[0]]
            start, length = hit[1], n
            while length < MATCH_CAP and length < start and length < size and doc[start - length - 1] == tokens[size - length - 1]:  # fmt: skip
                length += 1
            out = doc[start : start + k]
            cut = next((i for i, t in enumerate(out) if t < 0 or not agrees[start + i]), len(out))
            return (out[:cut], length) if cut else ([], 0)
        return [], 0
