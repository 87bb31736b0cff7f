"""The two invariants a round keeps, checked after every round in debug mode
(`LOCALSPEC_CHECK_INVARIANTS=1`; tests/conftest.py sets it, so every test's rounds are checked):

- a cache holds exactly the emitted tokens: every position an evaluator has cached for a sequence
  holds the token the sequence emitted there (`cached_tokens`, recorded by llama.Context and the fake
  backends), the target at most `tokens[:-1]` and the draft at most `tokens`;
- a matcher is exactly where its emitted tokens put it: it consumed the sequence's generated tokens,
  in order, and holds no draft of a round that is over.

A speculative round writes drafts into both caches and the matcher before it knows which it keeps;
these say that whatever it did not keep is gone when the round ends, whichever way it ended.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from localspec.decode.state import SeqState
from localspec.evaluator import Evaluator

ON = os.environ.get("LOCALSPEC_CHECK_INVARIANTS", "") not in ("", "0")


class InvariantBroken(AssertionError):
    """A round left a cache or a matcher somewhere its emitted tokens do not put it (a bug of ours)."""


def check(target: Evaluator, draft: Evaluator | None, states: Sequence[SeqState]) -> None:
    for st in states:
        _cache("target", target, st, len(st.tokens) - 1)
        if draft is not None:
            _cache("draft", draft, st, len(st.tokens))
        if st.track is not None and st.finish != "error":  # a stuck grammar ended where it stuck
            _matcher(st)


def _cache(name: str, ctx: Evaluator, st: SeqState, most: int) -> None:
    past = ctx.past(st.seq)
    held = np.asarray(ctx.cached_tokens(st.seq)[:past], dtype=np.int64)
    if past > max(most, 0) or not np.array_equal(held, np.asarray(st.tokens[:past], dtype=np.int64)):
        at = next((i for i, (a, b) in enumerate(zip(held.tolist(), st.tokens)) if a != b), min(past, most))
        raise InvariantBroken(
            f"sequence {st.seq}: the {name}'s cache holds {past} positions (at most {most}) and differs "
            f"from the emitted tokens at position {at}"
        )


def _matcher(st: SeqState) -> None:
    track = st.track
    generated = st.tokens[len(st.tokens) - st.n_new :]
    if track.masks or track.matcher.consumed != generated:
        raise InvariantBroken(
            f"sequence {st.seq}: its matcher consumed {track.matcher.n_consumed} tokens with "
            f"{track.n_drafted} drafts pending; the sequence emitted {len(generated)}"
        )
