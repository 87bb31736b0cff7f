"""How much of a verify pass is network time when the target is split over rpc-servers: the same
verify batches timed on the split target and on the target loaded all-local; the difference is
what the network (and the RPC protocol) adds. Measured per batch size, since that is what the
draft-length tuner trades against: a remote verify is dearer and flatter in the batch size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from localspec.draft_len.calibrate import floor_time

VERIFY_SIZES = (1, 2, 4, 8, 16)
PREFIX = 32  # tokens already in the cache, as in a real round


def verify_times(ctx: Any, sizes: Sequence[int] = VERIFY_SIZES, reps: int = 5) -> dict[int, float]:
    """Seconds for one verify batch of each size (all rows' logits, as the loop asks), the fastest
    of `reps` after one untimed warm-up: interference only ever adds time."""
    n_vocab = ctx.n_vocab
    ids = [(17 + 7919 * i) % n_vocab for i in range(PREFIX + max(sizes))]
    ctx.reset()
    ctx.eval(ids[:PREFIX], 0, 1)
    out: dict[int, float] = {}
    for n in sizes:
        batch = ids[PREFIX : PREFIX + n]
        floor_time(ctx, batch, ctx.past(0), 1)  # untimed: first-use allocations are not a cost
        out[n] = floor_time(ctx, batch, ctx.past(0), reps)
    ctx.reset()
    return out


@dataclass(frozen=True)
class NetworkCost:
    batch: int  # tokens in the verify batch (K drafted + 1)
    rpc_ms: float
    local_ms: float

    @property
    def network_ms(self) -> float:
        return max(0.0, self.rpc_ms - self.local_ms)

    @property
    def share(self) -> float:
        """The part of a split verify that is network time."""
        return self.network_ms / self.rpc_ms if self.rpc_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "rpc_ms": round(self.rpc_ms, 3),
            "local_ms": round(self.local_ms, 3),
            "network_ms": round(self.network_ms, 3),
            "share": round(self.share, 3),
        }


def compare(rpc: dict[int, float], local: dict[int, float]) -> list[NetworkCost]:
    return [NetworkCost(n, rpc[n] * 1e3, local[n] * 1e3) for n in sorted(rpc) if n in local]
