"""How many tokens to draft each round.

`FixedK` always asks for K. `AutoK` picks K to maximise expected tokens per second from online
measurements: per-position acceptance a_i, the draft's per-token time t_d and the target's verify
time T(n) for a batch of n tokens (fit as a + b*n; nearly flat on a GPU, steep on a CPU):

    rate(K) = (1 + sum_{k<=K} prod_{i<=k} a_i) / (K * t_d + T(K + 1) + o)

where o is the per-round overhead. K = 0 means a plain target step. When the measured speculative
rate over a window falls below the measured plain rate, AutoK falls back to plain decoding and
re-probes later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


class FixedK:
    def __init__(self, k: int) -> None:
        self.k = k
        self.fallbacks = 0

    def choose(self) -> int:
        return self.k

    def observe(self, *, k: int, n_drafted: int, n_accepted: int, n_emitted: int, draft_s: float,
                verify_s: float, round_s: float) -> None:
        pass


@dataclass
class _Ema:
    value: float | None = None
    n: int = 0

    def add(self, x: float, w: float = 0.2) -> None:
        self.value = x if self.value is None else (1 - w) * self.value + w * x
        self.n += 1


class _Floor:
    """The minimum of the last few timings: interference (other processes, page faults) only ever
    adds time, so the floor tracks the true cost better than a mean does."""

    def __init__(self, n: int = 8) -> None:
        self.samples: deque[float] = deque(maxlen=n)

    def add(self, x: float) -> None:
        self.samples.append(x)

    @property
    def value(self) -> float | None:
        return min(self.samples) if self.samples else None


@dataclass
class AutoK:
    k_max: int = 16
    k_min: int = 1
    prior_accept: float = 0.7  # before any evidence: a typical same-family pair
    prior_weight: float = 2.0
    window: int = 8  # rounds over which the realised speculative rate is judged
    reprobe_after: int = 32  # plain steps before speculation is tried again
    decay: float = 0.98  # per-round forgetting of acceptance evidence (~50-round memory)
    # state ------------------------------------------------------------------------------------
    acc: np.ndarray = field(default=None)  # type: ignore[assignment]
    tried: np.ndarray = field(default=None)  # type: ignore[assignment]
    t_draft: _Floor = field(default_factory=_Floor)
    t_overhead: _Ema = field(default_factory=_Ema)
    verify: dict[int, _Floor] = field(default_factory=dict)
    recent: deque = field(default_factory=lambda: deque(maxlen=8))
    plain_left: int = 0
    fallbacks: int = 0
    _reprobe: bool = False
    _seen_first: bool = False
    # probe rounds: batch sizes 2, 5 and 1 twice each, so the verify-time line has two good points
    _probe: list[int] = field(default_factory=lambda: [1, 4, 0, 1, 4, 0])

    def __post_init__(self) -> None:
        self.acc = np.zeros(self.k_max)
        self.tried = np.zeros(self.k_max)
        self.recent = deque(maxlen=self.window)
        self.k_min = max(1, self.k_min)

    # -- model --------------------------------------------------------------------------------
    def accept_probs(self) -> np.ndarray:
        """Posterior-mean acceptance per position, conditional on reaching that position."""
        a0, w = self.prior_accept, self.prior_weight
        return (self.acc + a0 * w) / (self.tried + w)

    def verify_time(self, n: int) -> float:
        pts = [(b, e.value) for b, e in self.verify.items() if e.value is not None]
        if not pts:
            return 1.0
        if len(pts) == 1:  # one batch size seen: assume the CPU-like slope of 10% per token
            b, t = pts[0]
            return t * (1 + 0.1 * (n - b)) if n > b else t / (1 + 0.1 * (b - n))
        x = np.array([p[0] for p in pts], dtype=float)
        y = np.array([p[1] for p in pts], dtype=float)
        b1, b0 = np.polyfit(x, y, 1)
        return max(b0 + max(b1, 0.0) * n, 1e-6)

    def expected_rate(self, k: int) -> float:
        o = self.t_overhead.value or 0.0
        if k == 0:
            return 1.0 / (self.verify_time(1) + o)
        reach = np.cumprod(self.accept_probs()[:k])
        tokens = 1.0 + reach.sum()
        return tokens / (k * (self.t_draft.value or 0.0) + self.verify_time(k + 1) + o)

    def best_k(self) -> int:
        rates = [self.expected_rate(k) for k in range(self.k_min, self.k_max + 1)]
        return self.k_min + int(np.argmax(rates))

    # -- protocol -----------------------------------------------------------------------------
    def choose(self) -> int:
        if self._probe:  # a few probe rounds measure T(1) and the slope before trusting the model
            return self._probe.pop(0)
        if self.plain_left > 0:
            self.plain_left -= 1
            self._reprobe = self.plain_left == 0
            return 0
        k = self.best_k()
        if self._reprobe:  # one real round after a fallback, so fresh evidence can win it back
            self._reprobe = False
            return k
        if self.expected_rate(k) < self.expected_rate(0):
            self._fall_back()
            return 0
        return k

    def _fall_back(self) -> None:
        self.fallbacks += 1
        self.plain_left = self.reprobe_after - 1
        self.recent.clear()

    def observe(self, *, k: int, n_drafted: int, n_accepted: int, n_emitted: int, draft_s: float,
                verify_s: float, round_s: float) -> None:
        if self._seen_first:  # the first round pays one-off costs (graph building): not a timing
            self.verify.setdefault(n_drafted + 1, _Floor()).add(verify_s)
            self.t_overhead.add(max(round_s - draft_s - verify_s, 0.0))
            if n_drafted:
                self.t_draft.add(draft_s / n_drafted)
        self._seen_first = True
        if n_drafted == 0:
            return
        upto = min(n_drafted, self.k_max)
        self.acc *= self.decay
        self.tried *= self.decay
        self.tried[:upto] += np.arange(upto) <= n_accepted  # positions reached in this round
        self.acc[: min(n_accepted, upto)] += 1
        self.recent.append((n_emitted, round_s))
        if len(self.recent) == self.recent.maxlen and self.verify.get(1):
            toks = sum(n for n, _ in self.recent)
            secs = sum(s for _, s in self.recent)
            if toks / secs < self.expected_rate(0):
                self._fall_back()
