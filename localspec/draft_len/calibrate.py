"""Measure the machine's costs while the models load, so the first request starts at a good K.

The tuner prices a round as K draft steps plus one verify of K+1 tokens. Verify cost per batch size
is measured, not modelled (saw-toothed on a CPU, flat on a GPU). Only the sizes that can matter are
timed: 1..4 always; larger ones only while the curve stays cheap (a flat GPU curve makes large K
worth pricing; on a steep CPU curve K > 3 cannot pay, and timing it would cost more than it tells);
and the sizes a full round of several sequences uses (`also`), which a line through 1..4 would
underprice on a CPU - a batch of 8 costs twice one of 4 there, not the 1.5x the line says.

On a recurrent memory (llama/recurrent.py) a timed verify is rolled back as a round rolls it back:
through a snapshot (restored: the cache is back at the same position) or through n_rs_seq, which
cannot drop a whole decode - the first token stays, and each try runs one position later.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, Sequence

from localspec.draft_len.costs import subadditive
from localspec.evaluator import Rollback

if TYPE_CHECKING:
    from localspec.llama.recurrent import RollbackStats


class Evaluator(Protocol):  # what timing needs of a context (llama.Context; the fake backend)
    rollback: Rollback
    max_draft: int | None

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1, seq: int = 0) -> object: ...

    def truncate(self, pos: int, seq: int = 0) -> None: ...

    def past(self, seq: int = 0) -> int: ...


BASE_SIZES = (1, 2, 3, 4)
FLAT = 1.6  # keep measuring larger batches while T(n) <= FLAT x T(1)


def floor_time(ctx: Evaluator, tokens: Sequence[int], pos: int, tries: int) -> float:
    """Seconds for one decode of `tokens` at `pos` with every row's logits (as a verify asks), the
    fastest of `tries`: interference only ever adds time. The cache is left at `pos` (an rs memory:
    `tries` positions later, see above)."""
    best = float("inf")
    # rs reaches back n_rs_seq tokens of the last decode, never all of them: keep the rest
    n_rs = ctx.max_draft if ctx.rollback == "rs" else None
    for _ in range(tries):
        t0 = time.perf_counter()
        ctx.eval(list(tokens), pos, len(tokens))
        best = min(best, time.perf_counter() - t0)
        pos += max(1, len(tokens) - n_rs) if n_rs is not None else 0
        ctx.truncate(pos)
    return best


def _floor(ctx: Evaluator, token: int, n: int, tries: int) -> float:
    return floor_time(ctx, [token] * n, ctx.past(0), tries)


def step_time(ctx: Evaluator, token: int, steps: int) -> float:
    """Seconds per one-token decode, as a draft model drafts: steps in a row, the fastest (the first
    also pays a recurrent memory's snapshot, which the round pays once per round, not per token)."""
    pos, best = ctx.past(0), float("inf")
    for i in range(steps):
        t0 = time.perf_counter()
        ctx.eval([token], pos + i, 1)
        best = min(best, time.perf_counter() - t0)
    ctx.truncate(pos)
    return best


def measure(
    target: Evaluator,
    draft: Evaluator | None,
    prefix: Sequence[int],
    *,
    max_batch: int,
    tries: int = 3,
    also: Sequence[int] = (),
) -> tuple[dict[int, float], float | None]:
    """Verify seconds by batch size and draft seconds per token, at the depth of `prefix`.
    Both caches are left empty. The base sizes are timed in `tries` interleaved passes (1, 2, 3, 4,
    1, 2, ...), so a burst of other work stalls one pass of every size, not every try of one."""
    depth = len(prefix)
    for ctx in (target, draft):
        if ctx is not None:
            ctx.truncate(0)
            ctx.eval(list(prefix), 0, 1)
            ctx.truncate(depth)  # settled: a recurrent memory snapshots at the next decode
            floor_time(ctx, [prefix[-1]], depth, 1)  # untimed: first-use allocations are not a cost
    base = [n for n in BASE_SIZES if n <= max_batch]
    verify = {n: float("inf") for n in base}
    for _ in range(tries):
        for n in base:
            verify[n] = min(verify[n], _floor(target, prefix[-1], n, 1))
    for n in range(len(base) + 1, max_batch + 1):
        if verify[n - 1] > FLAT * verify[1]:
            break
        verify[n] = _floor(target, prefix[-1], n, tries)
    for n in sorted(set(also) - set(verify)):
        verify[n] = _floor(target, prefix[-1], n, tries)
    draft_s = step_time(draft, prefix[-1], 2 * tries + 1) if draft is not None else None
    for ctx in (target, draft):
        if ctx is not None:
            ctx.truncate(0)
    return subadditive(verify), draft_s


def catch_up_time(draft: Evaluator, prefix: Sequence[int], tries: int = 2) -> float:
    """The draft's seconds per token when it catches up on many tokens in one decode, as it does on
    its prompt before its first draft, the fastest of `tries`. The cache is left empty."""
    best = float("inf")
    for _ in range(tries):
        draft.truncate(0)
        t0 = time.perf_counter()
        draft.eval(list(prefix), 0, 1)
        best = min(best, time.perf_counter() - t0)
    draft.truncate(0)
    return best / len(prefix)


class Rollable(Evaluator, Protocol):  # a context whose rollback keeps statistics (llama.Context)
    rollback_stats: "RollbackStats"


def rollback_cost(ctx: Rollable, prefix: Sequence[int], k: int = 4, tries: int = 5) -> dict:
    """What rolling back a verify of k drafts costs on this context (half of them kept), per round:
    the rollback itself, and the replay a restored snapshot needs (recurrent memories only). The
    cache is left empty."""
    ctx.truncate(0)
    ctx.eval(list(prefix), 0, 1)
    pos = len(prefix)
    rollback, replay = [], []
    for _ in range(tries):
        ctx.truncate(pos)  # settled: the verify below is tentative
        ctx.eval([prefix[-1]] * (k + 1), pos, k + 1)
        keep = pos + 1 + k // 2
        t0 = time.perf_counter()
        ctx.truncate(keep)
        t1 = time.perf_counter()
        if ctx.past(0) < keep:  # a restored snapshot: the kept tokens are decoded again
            ctx.eval([prefix[-1]] * (keep - ctx.past(0)), ctx.past(0), 1)
        rollback.append(t1 - t0)
        replay.append(time.perf_counter() - t1)
        pos = keep
    stats = ctx.rollback_stats
    ctx.truncate(0)
    out = {
        "rollback": ctx.rollback,
        "rollback_ms": min(rollback) * 1e3,
        "replay_ms": min(replay) * 1e3,
    }
    if stats.snapshots:
        out |= {
            "state_bytes": stats.snapshot_bytes,
            "snapshot_ms": stats.snapshot_s / stats.snapshots * 1e3,
        }
    return out
