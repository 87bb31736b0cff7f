"""Prefix sharing across slots: a prompt's cached prefix is copied from whichever slot holds it, not
evaluated again - n choices of one prompt prefill it once, and a request that shares a system prompt
with a running one starts from that one's cache.

A copy is `copy_prefix(src, dst, n)` on a context: in llama.cpp's unified KV cache the cells gain
dst's sequence id (no data moves), and a later truncate of either sequence takes only its own id off
them, so each slot rolls back and reuses on its own. Only memories cut at any position share: a
recurrent or hybrid memory (llama/recurrent.py) holds one state per sequence, and a draft that
declares no `prefix_copy` (the MTP head, whose cache mirrors the target's decodes) keeps today's
per-slot reuse.

What each slot's target holds: a free slot its `cached` prefix, a running one `tokens[:past]`; its
draft holds a prefix of that (`draft.past`), caught up lazily at its first drafting round - which is
why a running sequence's lagging draft is topped up from another slot's draft before each round.
"""

from __future__ import annotations

from typing import Callable, Sequence

from localspec.decode.state import SeqState
from localspec.evaluator import Evaluator

CATCH_UP_RIDES = 2  # a draft this close behind catches up in its first draft step (round.py)
Held = dict[int, Sequence[int]]  # slot -> the tokens its target cache holds


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    m = min(len(a), len(b))
    if list(a[:m]) == list(b[:m]):  # the usual case, compared at C speed
        return m
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Sharing:
    """The scheduler's copies between slots, over the target's and the draft's contexts."""

    def __init__(self, target: Evaluator, draft: Evaluator | None) -> None:
        self.target, self.draft = target, draft
        ctxs = [c for c in (target, draft) if c is not None]
        # a KV cache only: a recurrent or hybrid memory's state is one per sequence and cannot be
        # shared part-way, so those keep reusing their own slot's prefix
        self.on = all(c.prefix_copy for c in ctxs)

    def source(self, held: Held, prompt: Sequence[int]) -> tuple[int | None, int]:
        """The slot whose target holds the longest prefix of `prompt`, and its length."""
        if not self.on:
            return None, 0
        best, n_best = None, 0
        for slot, toks in held.items():
            n = common_prefix(toks, prompt)
            if n > n_best:
                best, n_best = slot, n
        return best, n_best

    def should_wait(self, held: Held, prefilling: Sequence[SeqState], prompt: Sequence[int]) -> bool:
        """Whether a slot still prefilling will soon hold more of `prompt` than any slot holds now:
        then the job waits for it (at most until its prefill passes the common prefix, which its own
        chunked prefill would not have reached sooner) and copies it."""
        if not self.on or not prefilling:
            return False
        _, now = self.source(held, prompt)
        for st in prefilling:
            reach = min(common_prefix(st.tokens, prompt), len(st.tokens) - 1)  # it holds tokens[:-1] at most
            if reach > now and self.target.past(st.seq) < reach:
                return True
        return False

    def copy(self, src: int, dst: int, n: int, own: int) -> None:
        """dst's target takes src's first n positions (more than the `own` prefix it holds); dst's
        draft takes src's draft prefix where that is longer than its own."""
        self.target.copy_prefix(src, dst, n)
        if self.draft is not None:
            take, keep = min(n, self.draft.past(src)), min(own, self.draft.past(dst))
            if take > keep:
                self.draft.copy_prefix(src, dst, take)
            else:
                self.draft.truncate(keep, dst)

    def top_up_drafts(self, held: Callable[[], Held], decoding: Sequence[SeqState]) -> None:
        """Before a round: a drafting sequence (`decoding`: those the drafter drafts for) whose draft
        lags by more than its first draft step carries takes the longest prefix of its tokens
        another slot's draft holds, instead of its catch-up evaluating it again (the second of n
        choices, while the first drafts already)."""
        draft = self.draft
        if draft is None or not self.on:
            return
        lagging = [
            st for st in decoding
            if st.speculative and len(st.tokens) - 1 - draft.past(st.seq) > CATCH_UP_RIDES
        ]  # fmt: skip
        if not lagging:
            return
        in_draft = {slot: toks[: draft.past(slot)] for slot, toks in held().items()}
        for st in lagging:
            upto, have = len(st.tokens) - 1, draft.past(st.seq)
            best, n_best = None, have + CATCH_UP_RIDES
            for slot, toks in in_draft.items():
                if slot != st.seq and len(toks) > n_best:
                    n = min(common_prefix(toks, st.tokens), upto)
                    if n > n_best:
                        best, n_best = slot, n
            if best is not None:
                draft.copy_prefix(best, st.seq, n_best)
                in_draft[st.seq] = st.tokens[:n_best]
