"""What a round costs on this machine: the draft's time per token, the target's verify time per batch
size (measured per size, not modelled: saw-toothed on a CPU, flat on a GPU) and the per-round
overhead. One `Costs` per engine, held by its tuner pool and passed to every controller it makes:
the costs belong to the machine, and concurrent requests measure the same batches.

A target whose memory rolls back through snapshots (`replay`, llama/recurrent.py) pays once more
for every round with a rejection: the next round replays the kept tokens instead of drafting, a
verify of (accepted + 2) tokens that emits one. `replay_cost` prices that; n_rs_seq rollback costs
nothing outside the verify (its snapshots are written inside the decode, so T(n) holds them)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

# probe rounds (the first is not timed): every small K twice, and plain twice. Verify time is not
# linear in the batch size on a CPU (repacked Q4_K kernels take rows in fours: 3 tokens cost more
# than 4), so each batch size the model relies on is measured rather than interpolated.
PROBE = (1, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0)


@dataclass
class Ema:
    value: float | None = None
    n: int = 0

    def add(self, x: float, w: float = 0.2) -> None:
        self.value = x if self.value is None else (1 - w) * self.value + w * x
        self.n += 1


class Floor:
    """The minimum of the last few timings: interference (other processes, page faults) only ever
    adds time, so the floor tracks the true cost better than a mean does."""

    def __init__(self, n: int = 8) -> None:
        self.samples: deque[float] = deque(maxlen=n)

    def add(self, x: float) -> None:
        self.samples.append(x)

    @property
    def value(self) -> float | None:
        return min(self.samples) if self.samples else None

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


@dataclass
class Costs:
    t_draft: Floor = field(default_factory=Floor)
    # the draft's seconds per token when it catches up in one batched decode: its prompt pass, or
    # the tokens of a plain stretch, paid before its first draft after them
    t_catch: Floor = field(default_factory=Floor)
    t_overhead: Ema = field(default_factory=Ema)
    verify: dict[int, Floor] = field(default_factory=dict)  # batch size -> its timings
    seen_at: dict[int, int] = field(default_factory=dict)  # batch size -> round last measured
    # the probe rounds still to run before the model is trusted: only the first request pays them
    probe: list[int] = field(default_factory=list)
    replay: bool = False  # the target rolls back through snapshots: a rejection costs a replay round
    _line: tuple = ()  # (the measured points, b0, b1): the fit is redone only when they change

    @classmethod
    def unmeasured(cls, k_min: int, k_max: int, *, replay: bool = False) -> "Costs":
        """Costs to be found by probe rounds (nothing calibrated or remembered)."""
        return cls(probe=[k if k == 0 else min(max(k, k_min), k_max) for k in PROBE], replay=replay)

    def replay_cost(self, reach: np.ndarray, curve: np.ndarray) -> np.ndarray:
        """Expected seconds a round of K drafts adds to the next round, for K = 1..len(reach), where
        reach[j] is the chance drafts 1..j+1 are all accepted: with a rejection (1 - reach[K-1]),
        the next round verifies the expected kept tokens + 2 instead of one token."""
        if not self.replay:
            return np.zeros(len(reach))
        k = np.arange(1, len(reach) + 1)
        p_rej = np.maximum(1.0 - reach, 1e-12)
        kept = (np.cumsum(reach) - k * reach) / p_rej  # E[accepted | a rejection within K]
        n = np.clip(np.rint(kept).astype(int) + 2, 2, len(curve) - 1)
        return (1.0 - reach) * np.maximum(curve[n] - curve[1], 0.0)

    def prime(self, verify: dict[int, float], draft_s: float | None, catch_s: float | None = None) -> None:
        """Start from known costs (calibrated at load, or remembered): no probe rounds."""
        for n, t in subadditive(verify).items():
            self.verify.setdefault(n, Floor()).add(t)
            self.seen_at[n] = 0
        if draft_s is not None:
            self.t_draft.add(draft_s)
        if catch_s is not None:
            self.t_catch.add(catch_s)
        self.probe = []

    def snapshot(self) -> tuple[dict[int, float], float | None, float | None]:
        """What `prime` takes: the cost floors, to remember."""
        verify = {n: f.value for n, f in self.verify.items() if f.value is not None}
        return verify, self.t_draft.value, self.t_catch.value

    def add_verify(self, n: int, seconds: float, round_no: int) -> None:
        self.verify.setdefault(n, Floor()).add(seconds)
        self.seen_at[n] = round_no

    def measured(self, n: int) -> float | None:
        floor = self.verify.get(n)
        return floor.value if floor is not None else None

    def verify_time(self, n: int) -> float:
        """The measured floor for a batch of n tokens; batch sizes not yet seen come from a line
        through the measured ones (exploration then measures them if they look worth it)."""
        pts = self._points()
        if n in pts:
            return pts[n]
        if not pts:
            return 1.0
        if len(pts) == 1:  # one batch size seen: assume the CPU-like slope of 10% per token
            ((b, t),) = pts.items()
            return t * (1 + 0.1 * (n - b)) if n > b else t / (1 + 0.1 * (b - n))
        return float(self._line_at(pts, np.array([n], dtype=float))[0])

    def curve(self, k_max: int) -> np.ndarray:
        """verify_time(n) for n = 0..k_max + 1, with one line fit for the unmeasured sizes."""
        n = np.arange(k_max + 2, dtype=float)
        pts = self._points()
        if len(pts) < 2:
            return np.array([self.verify_time(int(b)) for b in n])
        out = self._line_at(pts, n)
        for b, t in pts.items():
            if b < len(out):
                out[b] = t
        return out

    def _points(self) -> dict[int, float]:
        return {b: e.value for b, e in self.verify.items() if e.value is not None}

    def _line_at(self, pts: dict[int, float], n: np.ndarray) -> np.ndarray:
        key = tuple(pts.items())
        if not self._line or self._line[0] != key:  # a round asks this for every K of every sequence
            self._line = (key, *_fit(pts))
        _, b0, b1 = self._line
        return np.maximum(b0 + b1 * n, min(pts.values()))


def _fit(pts: dict[int, float]) -> tuple[float, float]:
    """Intercept and slope of a line through the measured (batch size, seconds) points; the slope
    never negative (a bigger batch never costs less), the caller floors it at the cheapest point."""
    b1, b0 = np.polyfit(np.array(list(pts), dtype=float), np.array(list(pts.values()), dtype=float), 1)
    return float(b0), max(float(b1), 0.0)


SUBADDITIVE_SLACK = 1.25  # a kernel switch can make a batch dearer than two smaller ones by ~10%


def subadditive(verify: dict[int, float]) -> dict[int, float]:
    """The timings with a stalled size replaced by T(a) + T(b), a + b = n: one batch never costs
    much more than two smaller ones (it could run as them), so a size timed over SUBADDITIVE_SLACK
    times that was stalled in every pass. Priced at the stall, it would never be tried, nor timed
    afresh."""
    out = dict(verify)
    for n in sorted(out):
        parts = min((out[a] + out[n - a] for a in out if a < n and n - a in out), default=None)
        if parts is not None and out[n] > SUBADDITIVE_SLACK * parts:
            out[n] = parts
    return out
