"""A sequence's matcher through one speculative round (DESIGN.md, "One round with a constraint").

The round drafts ahead of what is verified, so the matcher is advanced along the draft - one mask
per drafted position, the same mask for the draft's row and the target's row there - and, after
verification, rolled back to the accepted prefix and moved on by the target's own token. Tokens the
grammar forces are drafts that cost nothing to make (a one-point q, as lookup drafts are).
"""

from __future__ import annotations

import functools
import time
from typing import Callable, Sequence, TypeVar

import numpy as np

from .mask import apply_mask, apply_mask_
from .matcher import Matcher

F = TypeVar("F", bound=Callable)


def _timed(fn: F) -> F:
    """Count the method's wall time in `spent_s`: what the constraint costs a round (mask work)."""

    @functools.wraps(fn)
    def wrapper(self: "Track", *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        t0 = time.perf_counter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self.spent_s += time.perf_counter() - t0

    return wrapper  # type: ignore[return-value]


class Track:
    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher
        self.masks: list[np.ndarray | None] = []  # masks[i]: allowed at draft position i (after i drafts)
        self.lost = False  # a blind draft left the grammar: later positions have no mask (none needed)
        self.spent_s = 0.0  # time in this track's operations since the last take_spent()

    @_timed
    def begin(self) -> None:
        """A new round: the mask at the first position (raises ConstraintStuck if nothing is allowed)."""
        self.masks = [self.matcher.mask()]
        self.lost = False

    @property
    def n_drafted(self) -> int:
        return len(self.masks) - 1

    @_timed
    def forced(self, limit: int) -> list[int]:
        """Up to `limit` tokens the grammar forces from here, drafted (pushed) already."""
        out = self.matcher.forced()[:limit] if limit > 0 else []
        return out[: self._push(out)]

    @_timed
    def valid(self, tokens: Sequence[int]) -> list[int]:
        """The leading part of a proposal (the lookup's) the grammar allows from here."""
        return list(tokens[: self.matcher.valid_prefix(tokens)])

    @_timed
    def push(self, tokens: Sequence[int]) -> int:
        """Draft `tokens` (allowed ones: sampled under the mask or checked by `valid`); returns how
        many were drafted - short of a token after which the grammar allows nothing (a dead end the
        target could not have taken either, so the draft stops before it)."""
        return self._push(tokens)

    def _push(self, tokens: Sequence[int]) -> int:
        for n, t in enumerate(tokens):
            self.matcher.consume([t])
            if self.matcher.ended:
                self.masks.append(None)
                continue
            m = self.matcher.allowed()
            if not m.any():
                self.matcher.rollback(1)
                return n
            self.masks.append(m)
        return len(tokens)

    @_timed
    def follow(self, token: int) -> None:
        """A draft made without the mask (llama.cpp's way, for comparison): follow it while the
        grammar allows it. The first token it does not allow is rejected by the masked target for
        certain (p = 0), so no position past it is ever verified and none needs a mask."""
        if not self.lost and (self.matcher.valid_prefix([token]) == 0 or not self._push([token])):
            self.lost = True

    @_timed
    def masked(self, row: np.ndarray, i: int) -> np.ndarray:
        """A logits row for draft position i, restricted to what the grammar allows there."""
        return apply_mask(row, self.masks[i])

    def has_mask(self, i: int) -> bool:
        """Whether draft position i has a mask (none past a lost blind draft or the grammar's end:
        the round never samples there)."""
        return i < len(self.masks) and self.masks[i] is not None

    @_timed
    def mask_(self, row: np.ndarray, i: int) -> np.ndarray:
        """`masked` in place, on a writable float32 row."""
        return apply_mask_(row, self.masks[i])

    @_timed
    def take_back(self, n: int) -> None:
        """Undraft the last n drafted tokens (the round verifies fewer than it drafted)."""
        if n > 0:
            self.matcher.rollback(n)
            del self.masks[-n:]

    @_timed
    def settle(self, kept: int, emitted: Sequence[int]) -> None:
        """After verification: the round kept the first `kept` drafts and then emitted `emitted`
        (the target's own token, usually); the matcher ends where the sequence does."""
        undo, self.masks = self.n_drafted - kept, []
        self.matcher.rollback(undo)
        self.matcher.consume(emitted)

    @_timed
    def end_round(self) -> None:
        """The round is over: drafts it did not settle (a decode raised before verification) are
        undrafted, so the next round starts where the emitted tokens put the matcher."""
        undo, self.masks = max(self.n_drafted, 0), []
        self.matcher.rollback(undo)

    def take_spent(self) -> float:
        spent, self.spent_s = self.spent_s, 0.0
        return spent

    @property
    def done(self) -> bool:
        """Only end of generation can follow: the answer is complete."""
        return self.matcher.is_done()
