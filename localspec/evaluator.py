"""The narrow backend protocol: what the round, the scheduler and the tuner need of a model context.
`llama/` implements it (`Context`, the MTP head), as do the fakes in tests/; `decode/`, `draft_len/`
and `engine/` read it, none of them importing the others. A context declares what it can do as
typed fields, set where it is made: nothing probes for an attribute, so a misspelt capability is an
error, not a silent default."""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol, Sequence

import numpy as np

# how `truncate` takes positions back: cut the KV cache anywhere | llama.cpp's n_rs_seq, within the
# last decode | restore a saved state and re-evaluate (llama/recurrent.py)
Rollback = Literal["truncate", "rs", "snapshot"]


class Item(NamedTuple):
    """One sequence's part of a decode: its tokens at positions pos.., and logits for the last
    n_logits of them."""

    seq: int
    tokens: Sequence[int]
    pos: int
    n_logits: int


class Evaluator(Protocol):
    """A model context over `n_seq` sequences (llama.Context; tests/fake_backend.py).

    `truncate` settles the positions before it; on a recurrent memory it may leave `past` below the
    position asked (a restored snapshot): the round re-evaluates the difference."""

    n_ctx: int  # per sequence
    n_vocab: int  # token ids 0..n_vocab-1; llama.cpp refuses a whole batch for one id beyond
    rollback: Rollback
    max_draft: int | None  # the most drafts one verify may take back (rs: n_rs_seq); None: any
    source: str  # as a draft context, whose drafts (the stats' name): "draft" model or "mtp" head
    top_k: int  # > 0: `use_top_logits` can give rows as their top_k largest logits (TopLogits)
    prefix_copy: bool  # `copy_prefix` shares a cached prefix between sequences (a KV cache)
    checkpoints: bool  # `checkpoint` keeps a prompt's state for a later request (recurrent memory)
    memory_kind: str  # attention | recurrent | hybrid
    saves_state: bool  # `seq_state` / `set_seq_state` give a sequence's cache as bytes and take it back
    can_shift: bool  # `reuse_chunks` moves cached runs to earlier positions (a KV cache)
    images_whole: bool  # an image's rows go in one decode (both ways attention: Gemma 3's)

    def past(self, seq: int = 0) -> int: ...

    def eval_batch(self, items: Sequence[Item]) -> list[np.ndarray]:
        """One decode of every item; each item's rows, copied."""

    def eval_views(self, items: Sequence[Item]) -> list[np.ndarray]:
        """`eval_batch`, the rows valid only until the next decode (no copy where it can)."""

    def truncate(self, pos: int, seq: int = 0) -> None: ...

    def is_eog(self, token: int) -> bool: ...

    def use_top_logits(self, seq: int, on: bool) -> bool:
        """Whether seq's rows come back as their top_k largest logits (llama.cpp's backend top-k)."""

    def cached_tokens(self, seq: int = 0) -> Sequence[int]:
        """The token evaluated at each cached position (the round's invariant check reads it)."""

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """dst holds src's first n cached positions (only where `prefix_copy`)."""

    def checkpoint(self, seq: int = 0, at: int | None = None) -> None:
        """Keep seq's state here, or where a later decode ends at `at` (only where `checkpoints`)."""

    def reuse_chunks(self, seq: int, prompt: Sequence[int], n_min: int) -> int:
        """Keep seq's cached prefix of `prompt` and the runs of >= n_min tokens it has further
        back, moved there (chunk_reuse.py); how many of prompt's tokens it holds (only where `can_shift`)."""

    def seq_state(self, seq: int) -> bytearray:
        """seq's whole cache as bytes (only where `saves_state`; a cache of text only)."""

    def set_seq_state(self, seq: int, data: memoryview, tokens: Sequence[int]) -> bool:
        """seq holds `tokens` again, from `seq_state`'s bytes; False (seq empty) when refused."""
