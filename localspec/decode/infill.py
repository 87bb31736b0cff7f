"""llama.cpp's infill sampler (llama_sampler_init_infill) as a pure function over a distribution.

Made for fill-in-the-middle: a token that is a prefix of another ("re" of "return") stands for the
same text, so their probabilities are merged into the likelier one; when end-of-text is, per
candidate, more than a third as likely as all the text together, only the end-of-generation tokens
stay; then text tokens under 0.2, and after that under 1/(text tokens left + 1), are dropped.

`sampling.process_rows` applies it after the other filters to every row it makes: plain decoding,
the draft's q and the verifier's p alike, so every acceptance rule stays lossless (the target's
distribution is this function of its logits). Greedy with it takes this distribution's most likely
token (sampling.py: a one-point distribution), since the merge can change which one that is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

CANDIDATES = 128  # merged among at most this many (past it every token is < 1/128, so dropped later)


@dataclass(frozen=True, eq=False)  # hashed by identity: one per vocabulary (a SamplingParams field)
class Infill:
    is_eog: Callable[[int], bool]
    piece: Callable[[int], bytes]  # a token's text; b"" for a control token (it merges with none)
    eot: int  # what it ends on when no text is left (llama.cpp's token_eot)
    _pieces: dict[int, bytes] = field(default_factory=dict, repr=False)

    def text(self, token: int) -> bytes:
        b = self._pieces.get(token)
        if b is None:
            b = self._pieces[token] = self.piece(token)
        return b


def infill(ids: np.ndarray, probs: np.ndarray, vocab: Infill) -> tuple[np.ndarray, np.ndarray]:
    """(ids, probabilities) of the infill sampler's distribution over a distribution's support."""
    order = np.lexsort((ids, -probs))[:CANDIDATES]
    order = order[probs[order] > 0]
    ids, p = ids[order].astype(np.int64), probs[order].astype(np.float64)
    eog = np.fromiter((vocab.is_eog(int(t)) for t in ids), bool, len(ids))
    p_eog = p[eog].sum()
    if 3 * p_eog * len(p) > p[~eog].sum():  # text too weak against the end: end it
        return ids[eog], p[eog] / p_eog
    _merge_prefixes(ids, p, vocab)
    keep = (p > 0) & ((p >= 0.2) | eog)
    n_text = int((keep & ~eog).sum())
    if n_text == 0:
        return np.array([vocab.eot], np.int64), np.ones(1)
    ids, p, eog = ids[keep], p[keep] / p[keep].sum(), eog[keep]
    keep = (p >= 1.0 / (n_text + 1)) | eog
    return ids[keep], p[keep] / p[keep].sum()


def _merge_prefixes(ids: np.ndarray, p: np.ndarray, vocab: Infill) -> None:
    """In place, in llama.cpp's order: for each pair where one token's text starts the other's,
    the less likely one's probability goes to the likelier one and it leaves (p = 0)."""
    texts = [vocab.text(int(t)) for t in ids]
    n = len(ids)
    dead = [False] * n
    for i0 in range(n):
        for i1 in range(n):
            if dead[i0]:
                break
            if i0 == i1 or dead[i1]:
                continue
            if texts[i0] and texts[i1].startswith(texts[i0]):
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] += p[src]
                p[src], dead[src] = 0.0, True


def argmax_of(ids: np.ndarray, probs: np.ndarray) -> int:
    """The most likely token (ties: the lower id), as greedy picks it."""
    return int(ids[np.lexsort((ids, -probs))[0]])
