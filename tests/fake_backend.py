"""A model-free backend for the loop: a Markov chain over a toy vocabulary.

Logits at a position depend only on the token there, so exact distributions are known in closed
form, and the fake is batch-invariant (unlike llama.cpp), so greedy results must match exactly.
Every eval is recorded and the cache is checked the way llama.cpp's would be.
"""

from __future__ import annotations

import numpy as np


class FakeContext:
    def __init__(self, table: np.ndarray, *, n_ctx: int = 512, eog: frozenset[int] = frozenset()) -> None:
        self.table = np.asarray(table, dtype=np.float32)  # table[token] = logits of the next token
        self.n_ctx = n_ctx
        self.n_vocab = self.table.shape[1]
        self.eog = eog
        self.cache: list[int] = []
        self.calls: list[
            tuple[str, list[int] | int, int]
        ] = []  # ("eval", tokens, pos) / ("truncate", pos, 0)
        self.hook = None  # called after every eval/truncate with self

    @property
    def n_past(self) -> int:
        return len(self.cache)

    def eval(self, tokens, pos: int, n_logits: int = 1) -> np.ndarray:
        assert pos == len(self.cache), f"eval at {pos} with {len(self.cache)} cached"
        assert 1 <= n_logits <= len(tokens)
        assert pos + len(tokens) <= self.n_ctx
        self.cache.extend(int(t) for t in tokens)
        self.calls.append(("eval", [int(t) for t in tokens], pos))
        if self.hook:
            self.hook(self)
        return self.table[np.asarray(tokens[len(tokens) - n_logits :])]

    def truncate(self, pos: int) -> None:
        del self.cache[pos:]
        self.calls.append(("truncate", pos, 0))
        if self.hook:
            self.hook(self)

    def is_eog(self, token: int) -> bool:
        return token in self.eog


def markov_tables(v: int = 8, noise: float = 0.0, seed: int = 0, scale: float = 3.0):
    """A target table and a draft table that disagrees with it by `noise`."""
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(v, v)) * scale
    draft = target + rng.normal(size=(v, v)) * noise
    return target, draft
