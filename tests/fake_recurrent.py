"""A model-free recurrent backend: logits depend on the whole history, and its memory behaves as
llama.cpp's recurrent memory does - one state per sequence that `seq_rm` can only cut within the
last decode's tokens (n_rs_seq), once, or not at all - with the real rollback policy
(localspec/llama/recurrent.py RecurrentRollback) on top. A rollback that llama.cpp would serve with
a stale state (a snapshot slot the last decode did not write) corrupts the fake's state, so any
misuse shows up in the output. Batch-invariant: greedy results must match plain decoding exactly."""

from __future__ import annotations

import numpy as np

from localspec.llama.recurrent import RecurrentRollback

M = 7  # context classes: what the history adds to the next token's logits


class FakeRecurrentMemory:
    """The state operations RecurrentRollback drives (llama.cpp's, emulated on token lists)."""

    def __init__(self, n_seq: int, n_rs: int) -> None:
        self.n_rs = n_rs
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]  # what each state has read
        self.last_len = [0] * n_seq
        self.pending = [False] * n_seq
        self.saves = self.loads = 0

    def seq_rm(self, seq: int, p0: int, p1: int) -> bool:
        t = self.tokens[seq]
        if p0 <= 0 and p1 < 0:
            t.clear()
            self.pending[seq] = False
            return True
        if p0 >= len(t):
            return True
        back = len(t) - p0
        if not self.n_rs or self.pending[seq] or back > self.n_rs:
            return False
        if back > self.last_len[seq] - 1:  # llama.cpp reads a slot its last decode never wrote
            t[:] = [-1] * p0
        else:
            del t[p0:]
        self.pending[seq] = True
        return True

    def span(self, seq: int, p0: int, p1: int) -> int:
        return p1 - p0  # one position a token: no M-RoPE image here

    def size(self, seq: int) -> int:
        return len(self.tokens[seq])

    def save(self, seq: int, buf):  # noqa: ANN001, ANN201
        self.saves += 1
        return list(self.tokens[seq])

    def load(self, seq: int, buf) -> bool:  # noqa: ANN001
        self.loads += 1
        self.tokens[seq] = list(buf)
        self.pending[seq] = False
        return True

    def decoded(self, seq: int, tokens: list[int]) -> None:
        self.tokens[seq].extend(tokens)
        self.last_len[seq] = len(tokens)
        self.pending[seq] = False


class FakeRecurrentContext:
    """table[token] + ctx_table[class of the history]: the next token depends on everything read."""

    def __init__(
        self,
        table: np.ndarray,
        ctx_table: np.ndarray,
        *,
        n_ctx: int = 512,
        n_seq: int = 1,
        n_rs: int = 0,
        eog: frozenset[int] = frozenset(),
    ) -> None:
        self.table, self.ctx_table = np.asarray(table, np.float32), np.asarray(ctx_table, np.float32)
        self.n_ctx, self.n_seq, self.n_vocab, self.eog = n_ctx, n_seq, self.table.shape[1], eog
        self.mem = FakeRecurrentMemory(n_seq, n_rs)
        self._rb = RecurrentRollback(self.mem, n_seq)
        # the Evaluator protocol's fields: a recurrent memory, as llama.Context over one
        self.rollback = self._rb.kind
        self.max_draft = n_rs if self.rollback == "rs" else None
        self.memory_kind = "recurrent"
        self.source, self.top_k, self.prefix_copy, self.checkpoints = "draft", 0, False, True
        self.saves_state = False  # a recurrent state is not only its tokens'
        self.can_shift = False  # nor can its positions move
        self.images_whole = True
        self._past = [0] * n_seq
        self.decodes: list[list[int]] = []

    def past(self, seq: int = 0) -> int:
        return self._past[seq]

    def is_eog(self, token: int) -> bool:
        return token in self.eog

    def eval(self, tokens, pos: int, n_logits: int = 1, seq: int = 0) -> np.ndarray:  # noqa: ANN001
        return self.eval_batch([(seq, tokens, pos, n_logits)])[0]

    def eval_batch(self, items) -> list[np.ndarray]:  # noqa: ANN001
        assert len({s for s, *_ in items}) == len(items), "a sequence twice in one decode"
        out = []
        for seq, tokens, pos, n_logits in items:
            assert pos == self._past[seq], f"seq {seq}: eval at {pos} with {self._past[seq]} cached"
            assert 1 <= n_logits <= len(tokens) and pos + len(tokens) <= self.n_ctx
            self._rb.before_decode(seq, pos)
            rows = []
            for tok in tokens:
                self.mem.decoded(seq, [int(tok)])
                rows.append(self.table[int(tok)] + self.ctx_table[self._cls(self.mem.tokens[seq])])
            self.mem.last_len[seq] = len(tokens)
            self._rb.after_decode(seq, len(tokens))
            self._past[seq] = pos + len(tokens)
            out.append(np.stack(rows[len(rows) - n_logits :]))
        self.decodes.append([s for s, *_ in items])
        return out

    def eval_views(self, items) -> list[np.ndarray]:  # noqa: ANN001
        return self.eval_batch(items)

    def use_top_logits(self, seq: int, on: bool) -> bool:
        return False  # whole rows

    @staticmethod
    def _cls(history: list[int]) -> int:
        h = 0
        for t in history:
            h = (h * 31 + t + 1) % 1000003
        return h % M

    def cached_tokens(self, seq: int = 0) -> list[int]:
        """What the sequence's state has read, position by position (-1: a stale state's garbage)."""
        return self.mem.tokens[seq]

    def checkpoint(self, seq: int = 0, at: int | None = None) -> None:
        self._rb.checkpoint(seq, self._past[seq], at)

    def truncate(self, pos: int, seq: int = 0) -> None:
        self._past[seq] = self._rb.truncate(seq, pos, self._past[seq])
        assert self.mem.tokens[seq] == [] or len(self.mem.tokens[seq]) == self._past[seq]

    def reset(self) -> None:
        for seq in range(self.n_seq):
            self.mem.seq_rm(seq, -1, -1)
        self._past = [0] * self.n_seq
        self._rb.reset()

    @property
    def rollback_stats(self):  # noqa: ANN201
        return self._rb.stats


def recurrent_tables(v: int = 8, noise: float = 0.0, seed: int = 0, scale: float = 3.0):
    """(target table, target ctx table), (draft table, draft ctx table): the draft disagrees by noise."""
    rng = np.random.default_rng(seed)
    t, c = rng.normal(size=(v, v)) * scale, rng.normal(size=(M, v)) * scale
    return (t, c), (t + rng.normal(size=(v, v)) * noise, c + rng.normal(size=(M, v)) * noise)
