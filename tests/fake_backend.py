"""A model-free backend for the loop: a Markov chain over a toy vocabulary.

Logits at a position depend only on the token there, so exact distributions are known in closed
form, and the fake is batch-invariant (unlike llama.cpp), so greedy results must match exactly.
Every eval is recorded and each sequence's cache is checked the way llama.cpp's would be; a batch
holding an id beyond the vocabulary is refused whole, as llama.cpp refuses it.
"""

from __future__ import annotations

import numpy as np

from localspec import chunk_reuse
from localspec.errors import LocalspecError
from localspec.top_logits import TopLogits


class FakeContext:
    # the Evaluator protocol's fields: a KV cache, as llama.Context over an attention model
    rollback = "truncate"
    max_draft = None
    source = "draft"
    prefix_copy = True
    checkpoints = False
    saves_state = True  # its "KV state" is the tokens it holds, as bytes
    can_shift = True  # a run of its cache moves with its tokens (its logits depend on the token alone)
    images_whole = True  # an image's ids (tests that give some) go in one decode
    memory_kind = "attention"

    def __init__(
        self,
        table: np.ndarray,
        *,
        n_ctx: int = 512,
        eog: frozenset[int] = frozenset(),
        n_seq: int = 1,
        top_k: int = 0,
    ) -> None:
        self.table = np.asarray(table, dtype=np.float32)  # table[token] = logits of the next token
        self.n_ctx = n_ctx  # per sequence
        self.n_seq = n_seq
        self.n_vocab = self.table.shape[1]
        self.eog = eog
        self.caches: list[list[int]] = [[] for _ in range(n_seq)]
        self.calls: list[
            tuple[str, list[int] | int, int]
        ] = []  # sequence 0: ("eval", tokens, pos) / ("truncate", pos, 0)
        self.seq_calls: list[tuple[int, str, list[int] | int, int]] = []  # every sequence: (seq, kind, ...)
        self.decodes: list[list[int]] = []  # per decode call: the sequences it held
        self.hook = None  # called after every decode/truncate with self
        self.top_k = top_k  # as llama.Context's backend top-k: rows as their top_k largest logits
        self.top_on = [False] * n_seq

    @property
    def cache(self) -> list[int]:
        return self.caches[0]

    @property
    def n_past(self) -> int:
        return len(self.caches[0])

    def past(self, seq: int = 0) -> int:
        return len(self.caches[seq])

    def use_top_logits(self, seq: int, on: bool) -> bool:
        self.top_on[seq] = on and self.top_k > 0
        return self.top_on[seq]

    def eval(self, tokens, pos: int, n_logits: int = 1, seq: int = 0) -> np.ndarray:
        return self.eval_batch([(seq, tokens, pos, n_logits)])[0]

    def eval_batch(self, items) -> list[np.ndarray]:  # noqa: ANN001
        assert len({s for s, *_ in items}) == len(items), "a sequence twice in one decode"
        if any(not 0 <= int(t) < self.n_vocab for _, tokens, *_ in items for t in tokens):
            # llama.cpp checks every id of a batch first and refuses the whole batch for one
            raise LocalspecError("llama_decode failed (code -1): invalid token in the batch")
        out = []
        for seq, tokens, pos, n_logits in items:
            cache = self.caches[seq]
            assert pos == len(cache), f"seq {seq}: eval at {pos} with {len(cache)} cached"
            assert 1 <= n_logits <= len(tokens)
            assert pos + len(tokens) <= self.n_ctx
            cache.extend(int(t) for t in tokens)
            self._record(seq, ("eval", [int(t) for t in tokens], pos))
            rows = self._rows(seq, pos + len(tokens) - n_logits, n_logits)
            out.append(TopLogits.of_rows(rows, self.top_k) if self.top_on[seq] else rows)
        self.decodes.append([s for s, *_ in items])
        if self.hook:
            self.hook(self)
        return out

    def eval_views(self, items) -> list[np.ndarray]:  # noqa: ANN001 - copies (eval_batch, maybe patched)
        return self.eval_batch(items)

    def _rows(self, seq: int, first: int, n: int) -> np.ndarray:
        """The logits rows of positions first.. (cached already): the next token's, from the token there."""
        return self.table[np.asarray(self.caches[seq][first : first + n])]

    def cached_tokens(self, seq: int = 0) -> list[int]:
        """The token evaluated at each cached position (the round's invariant checks read it)."""
        return self.caches[seq]

    def truncate(self, pos: int, seq: int = 0) -> None:
        del self.caches[seq][pos:]
        self._record(seq, ("truncate", pos, 0))
        if self.hook:
            self.hook(self)

    def reuse_chunks(self, seq: int, prompt, n_min: int) -> int:  # noqa: ANN001
        """As llama.Context.reuse_chunks: the planned runs move back, the rest is dropped."""
        held = self.caches[seq]
        _, moves, end = chunk_reuse.plan(held, prompt, n_min)
        for src, dst, m in moves:
            held[dst : dst + m] = held[src : src + m]
        del held[end:]
        self._record(seq, ("reuse", end, len(moves)))
        return end

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """As llama.Context.copy_prefix: dst now holds src's first n positions (no decode)."""
        assert src != dst and n <= len(self.caches[src]), (src, dst, n)
        self.caches[dst] = self.caches[src][:n]
        self._record(dst, ("copy", src, n))
        if self.hook:
            self.hook(self)

    def seq_state(self, seq: int) -> bytearray:
        """As llama.Context.seq_state: the cache's contents as bytes (here, its tokens)."""
        return bytearray(np.asarray(self.caches[seq], np.int32).tobytes())

    def set_seq_state(self, seq: int, data, tokens) -> bool:  # noqa: ANN001
        """As llama.Context.set_seq_state: refused (the sequence emptied) unless the bytes hold tokens."""
        held = np.frombuffer(bytes(data), np.int32).tolist() if len(data) % 4 == 0 else None
        ok = held is not None and held == [int(t) for t in tokens]
        self.caches[seq] = held if ok else []
        self._record(seq, ("restore", len(self.caches[seq]), 0))
        return ok

    def reset(self) -> None:
        self.caches = [[] for _ in range(self.n_seq)]

    def _record(self, seq: int, call: tuple) -> None:
        self.seq_calls.append((seq, *call))
        if seq == 0:
            self.calls.append(call)

    def is_eog(self, token: int) -> bool:
        return token in self.eog


class AttentionContext(FakeContext):
    """Rows that read the cache as attention does: the row at position p depends on the token there
    and on every token *cached* before it (a hash of them picks one of `ctx` rows to add), so a cache
    holding a token the sequence never emitted changes what comes next - which a Markov fake, whose
    rows see only their own token, cannot show."""

    def __init__(self, table: np.ndarray, ctx: np.ndarray, **kw) -> None:  # noqa: ANN003
        super().__init__(table, **kw)
        self.ctx = np.asarray(ctx, dtype=np.float32)

    def _rows(self, seq: int, first: int, n: int) -> np.ndarray:
        cache = self.caches[seq]
        seen = [_prefix_class(cache[:p], len(self.ctx)) for p in range(first, first + n)]
        return super()._rows(seq, first, n) + self.ctx[np.asarray(seen)]


def _prefix_class(tokens: list[int], m: int) -> int:
    h = 0
    for t in tokens:
        h = (h * 31 + t + 1) % 1000003
    return h % m


def markov_tables(v: int = 8, noise: float = 0.0, seed: int = 0, scale: float = 3.0):
    """A target table and a draft table that disagrees with it by `noise`."""
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(v, v)) * scale
    draft = target + rng.normal(size=(v, v)) * noise
    return target, draft
