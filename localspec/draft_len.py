"""How many tokens to draft each round.

`FixedK` always asks for K. `AutoK` picks K to maximise expected tokens per second from online
measurements: per-position acceptance a_i, the draft's per-token time t_d and the target's verify
time T(n) for a batch of n tokens (nearly flat on a GPU; steep and saw-toothed on a CPU, so it is
measured per batch size, with a line through the measurements only for sizes not yet seen):

    rate(K) = (1 + sum_{k<=K} prod_{i<=k} a_i) / (K * t_d + T(K + 1) + o)

where o is the per-round overhead. K = 0 means a plain target step. When the measured speculative
rate over a window falls below the measured plain rate, AutoK falls back to plain decoding and
re-probes later.

Under load several sequences share each round, and the target's verify pass is one batch of all
their tokens. `choose_batch` then picks each sequence's K for the batch it is in: the verify cost
is a function of the *total* batch size (the timings are shared by every sequence's controller, see
`AutoK.fork`), so it adds draft tokens one at a time where they raise the batch's expected tokens
per second most, and stops - at no drafting at all - once batching alone already uses the hardware.
Acceptance stays per sequence.

A second source of drafts, the lookup (lookup.py), proposes a match's continuation at no draft
cost. Each round the sequence `offer`s what its lookup found; the controller then prices both plans -
the draft model alone, or the lookup's tokens first with the draft model extending them - with
acceptance learned per source (the lookup's per match length, as its confidence), and picks the best
plan and K together.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# lookup matches are judged by their length: 2, 3, 4-7, 8-15 and 16+ matched tokens
LOOKUP_BUCKETS = (2, 3, 4, 8, 16)
FIXED_LOOKUP_MIN = 4  # a fixed K puts lookup tokens first only from this match length on
# a match's next token is kept this often, per bucket, over the bench prompts of every kind
# (scripts/lookup_priors.py); sampling keeps it with probability p(x), less often than greedy does
LOOKUP_PRIORS = (0.5, 0.65, 0.7, 0.9, 0.95)
LOOKUP_PRIORS_SAMPLED = (0.4, 0.55, 0.65, 0.8, 0.9)  # T = 0.8


def lookup_bucket(match_len: int) -> int:
    return sum(match_len >= b for b in LOOKUP_BUCKETS) - 1


class FixedK:
    """K tokens every round; a long enough lookup match supplies the first of them."""

    def __init__(self, k: int, *, has_model: bool = True) -> None:
        self.k = k
        self.has_model = has_model
        self.fallbacks = 0
        self.started_plain = False
        self.lookup_first = False
        self._n_lookup = 0

    def begin(self) -> None:
        pass

    def offer(self, n_lookup: int, match_len: int) -> None:
        self.lookup_first = n_lookup > 0 and (match_len >= FIXED_LOOKUP_MIN or not self.has_model)
        self._n_lookup = n_lookup if self.lookup_first else 0

    def choose(self) -> int:
        return self.k if self.has_model else min(self.k, self._n_lookup)

    def expected_tokens(self, k: int) -> float:
        return 1.0 + k

    def model_tokens(self, k: int) -> int:
        return k - min(k, self._n_lookup)

    def observe(self, **_round: float) -> None:  # a fixed K learns nothing from a round
        pass

    def observe_unused_offer(self, n_checked: int, n_kept: int) -> None:
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

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


@dataclass
class AutoK:
    k_max: int = 16
    k_min: int = 1
    prior_accept: float = 0.7  # before any evidence: a typical same-family pair
    prior_weight: float = 2.0
    # a match's next token is right this often before any evidence, by match-length bucket
    prior_lookup: tuple[float, ...] = LOOKUP_PRIORS
    has_model: bool = True  # False: lookup drafts only (--lookup only, no draft model)
    window: int = 16  # rounds over which the realised speculative rate is judged
    reprobe_after: int = 32  # plain steps before speculation is tried again
    decay: float = 0.95  # per-round forgetting of acceptance evidence (~20-round memory)
    explore_every: int = 32  # every Nth round tries a neighbour of the best K, so its cost stays measured
    min_evidence: float = 6.0  # drafted rounds (decayed) before the model may switch to plain: a few
    # unlucky first rounds, or one stalled calibration timing, must not cost a whole plain stretch
    # state ------------------------------------------------------------------------------------
    acc: np.ndarray = field(default=None)  # type: ignore[assignment]
    tried: np.ndarray = field(default=None)  # type: ignore[assignment]
    lk_acc: np.ndarray = field(default=None)  # type: ignore[assignment]  # per match-length bucket
    lk_tried: np.ndarray = field(default=None)  # type: ignore[assignment]
    lookup_first: bool = False  # this round's plan: the lookup's tokens first, the model extends them
    _n_lookup: int = 0  # what this round's lookup offers: tokens, and its match's bucket
    _bucket: int = -1
    t_draft: _Floor = field(default_factory=_Floor)
    t_overhead: _Ema = field(default_factory=_Ema)
    verify: dict[int, _Floor] = field(default_factory=dict)
    recent: deque = field(default_factory=lambda: deque(maxlen=8))
    plain_left: int = 0
    fallbacks: int = 0
    _reprobe: bool = False
    _seen_first: bool = False
    _rounds: int = 0
    _explores: int = 0
    _seen_at: dict[int, int] = field(default_factory=dict)  # batch size -> round last measured
    # probe rounds (the first is not timed): every small K twice, and plain twice. Verify time is not
    # linear in the batch size on a CPU (repacked Q4_K kernels take rows in fours: 3 tokens cost more
    # than 4), so each batch size the model relies on is measured rather than interpolated.
    _probe: list[int] = field(default_factory=lambda: [1, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0])
    _predict_start: bool = False  # primed: a request's first choice may be "plain" outright
    _stretch: int = 1  # plain stretches between re-probes grow while speculation keeps losing
    started_plain: bool = False  # this request began plain because speculation was predicted to lose
    _line: tuple = ()  # (the measured points, b0, b1): the fit is redone only when they change

    def __post_init__(self) -> None:
        self.acc = np.zeros(self.k_max)
        self.tried = np.zeros(self.k_max)
        self.lk_acc = np.zeros((len(LOOKUP_BUCKETS), self.k_max))
        self.lk_tried = np.zeros((len(LOOKUP_BUCKETS), self.k_max))
        self.recent = deque(maxlen=self.window)
        self.k_min = min(max(1, self.k_min), self.k_max)
        self._probe = [k if k == 0 else min(max(k, self.k_min), self.k_max) for k in self._probe]

    def fork(self) -> "AutoK":
        """A controller for one more request on the same pair: it shares this one's timings (they
        belong to the machine, and concurrent requests measure the same batch costs) and its probe
        schedule, and starts from its acceptance evidence at a quarter weight, as `begin` does."""
        c = AutoK(
            k_max=self.k_max,
            k_min=self.k_min,
            prior_accept=self.prior_accept,
            prior_weight=self.prior_weight,
            window=self.window,
            reprobe_after=self.reprobe_after,
            decay=self.decay,
            explore_every=self.explore_every,
            prior_lookup=self.prior_lookup,
            has_model=self.has_model,
        )
        c.share_timings(self)
        c.acc, c.tried = self.acc * 0.25, self.tried * 0.25
        c.lk_acc, c.lk_tried = self.lk_acc * 0.25, self.lk_tried * 0.25
        c._seen_first, c._rounds, c._explores = self._seen_first, self._rounds, self._explores
        c._predict_start = not self._probe  # costs known (primed, or probed once): start predicted
        return c

    def share_timings(self, other: "AutoK") -> None:
        """Use other's cost measurements (they belong to the machine) and its probe schedule (only
        the first request pays the probe rounds)."""
        self.t_draft, self.t_overhead, self.verify, self._seen_at = (
            other.t_draft,
            other.t_overhead,
            other.verify,
            other._seen_at,
        )
        self._probe = other._probe

    def absorb(self, other: "AutoK") -> None:
        """Take a finished request's acceptance evidence back (the next fork starts from it)."""
        self.acc, self.tried = other.acc.copy(), other.tried.copy()
        self.lk_acc, self.lk_tried = other.lk_acc.copy(), other.lk_tried.copy()
        self._seen_first = self._seen_first or other._seen_first
        self._rounds, self._explores = max(self._rounds, other._rounds), max(self._explores, other._explores)

    def prime(
        self,
        verify: dict[int, float],
        draft_s: float | None,
        acc: Sequence[float] = (),
        tried: Sequence[float] = (),
    ) -> None:
        """Start from known costs (calibrated at load, or remembered from an earlier process) and,
        when remembered, acceptance evidence: no probe rounds, the first round runs at the best K
        they predict. Remembered evidence enters at full weight here: each request's `fork` (or
        `begin`) takes it at a quarter, as it does between requests of one process."""
        for n, t in verify.items():
            self.verify.setdefault(n, _Floor()).add(t)
            self._seen_at[n] = 0
        if draft_s is not None:
            self.t_draft.add(draft_s)
        m = min(len(acc), self.k_max)
        self.acc[:m] += np.asarray(acc[:m], dtype=float)
        self.tried[:m] += np.asarray(tried[:m], dtype=float)
        self._probe = []
        self._seen_first = True  # the timings above already exclude first-use costs
        self._predict_start = True

    def snapshot(self) -> tuple[dict[int, float], float | None, list[float], list[float]]:
        """What `prime` takes: the cost floors and the acceptance evidence, to remember."""
        verify = {n: f.value for n, f in self.verify.items() if f.value is not None}
        return verify, self.t_draft.value, self.acc.tolist(), self.tried.tolist()

    def begin(self) -> None:
        """A new request on the same pair: timings carry over (they belong to the machine), the
        acceptance evidence is kept at a quarter weight (the new text may draft better or worse),
        and the per-request state starts afresh."""
        for a in (self.acc, self.tried, self.lk_acc, self.lk_tried):
            a *= 0.25
        self.recent.clear()
        self.plain_left, self.fallbacks, self._reprobe = 0, 0, False
        self.started_plain = False
        self._predict_start = not self._probe  # once costs are known, each request starts predicted

    # -- model --------------------------------------------------------------------------------
    def accept_probs(self) -> np.ndarray:
        """Posterior-mean acceptance per position, conditional on reaching that position. Deeper
        positions, rarely reached, take the first position's estimate as their prior rather than a
        fixed guess, which would pull the chosen K towards whatever the guess favours."""
        w = self.prior_weight
        first = (self.acc[0] + self.prior_accept * w) / (self.tried[0] + w)
        return (self.acc + first * w) / (self.tried + w)

    def verify_time(self, n: int) -> float:
        """The measured floor for a batch of n tokens; batch sizes not yet seen come from a line
        through the measured ones (exploration then measures them if they look worth it)."""
        pts = {b: e.value for b, e in self.verify.items() if e.value is not None}
        if n in pts:
            return pts[n]
        if not pts:
            return 1.0
        if len(pts) == 1:  # one batch size seen: assume the CPU-like slope of 10% per token
            ((b, t),) = pts.items()
            return t * (1 + 0.1 * (n - b)) if n > b else t / (1 + 0.1 * (b - n))
        return float(self._line_at(pts, np.array([n], dtype=float))[0])

    def _line_at(self, pts: dict[int, float], n: np.ndarray) -> np.ndarray:
        key = tuple(pts.items())
        if not self._line or self._line[0] != key:  # a round asks this for every K of every sequence
            self._line = (key, *_fit(pts))
        _, b0, b1 = self._line
        return np.maximum(b0 + b1 * n, min(pts.values()))

    def lookup_probs(self, bucket: int) -> np.ndarray:
        """`accept_probs` for lookup tokens proposed from a match in this length bucket."""
        w = self.prior_weight
        acc, tried = self.lk_acc[bucket], self.lk_tried[bucket]
        first = (acc[0] + self.prior_lookup[bucket] * w) / (tried[0] + w)
        return (acc + first * w) / (tried + w)

    def offer(self, n_lookup: int, match_len: int) -> None:
        """What this round's lookup proposes: n_lookup tokens from a match of match_len tokens."""
        self._n_lookup = n_lookup if match_len > 0 else 0
        self._bucket = lookup_bucket(match_len) if self._n_lookup else -1

    def _plan(self, lookup_first: bool | None) -> bool:
        return self.lookup_first if lookup_first is None else lookup_first

    def model_tokens(self, k: int, lookup_first: bool | None = None) -> int:
        """Of K drafts, how many the draft model makes (the rest come from the lookup)."""
        return k - min(k, self._n_lookup) if self._plan(lookup_first) else k

    def expected_tokens(self, k: int, lookup_first: bool | None = None) -> float:
        """Tokens one round with K drafts emits, on average (the target's own token included)."""
        if k <= 0:
            return 1.0
        return 1.0 + float(np.cumprod(self._plan_probs(self._plan(lookup_first))[:k]).sum())

    def expected_rate(self, k: int, lookup_first: bool | None = None) -> float:
        o = self.t_overhead.value or 0.0
        if k == 0:
            return 1.0 / (self.verify_time(1) + o)
        draft_s = self.model_tokens(k, lookup_first) * (self.t_draft.value or 0.0)
        return self.expected_tokens(k, lookup_first) / (draft_s + self.verify_time(k + 1) + o)

    def _plans(self, sources: str) -> list[tuple[int, bool]]:
        """(K, lookup first) candidates. sources: both; model (the draft model alone); lookup (the
        lookup's tokens alone, no draft model time)."""
        model = self.has_model and sources != "lookup"
        plans = [(k, False) for k in range(self.k_min, self.k_max + 1)] if model else []
        if self._n_lookup and sources != "model":
            top = self.k_max if model else min(self._n_lookup, self.k_max)
            plans += [(k, True) for k in range(self.k_min if model else 1, top + 1)]
        return plans

    def _plan_probs(self, lookup_first: bool) -> np.ndarray:
        """Acceptance by draft position (up to k_max) of a plan: the lookup's first, when it leads."""
        probs = self.accept_probs()
        if not lookup_first:
            return probs
        n = min(self._n_lookup, self.k_max)
        return np.concatenate([self.lookup_probs(self._bucket)[:n], probs[: self.k_max - n]])

    def _rates(self, lookup_first: bool, curve: np.ndarray) -> np.ndarray:
        """expected_rate for K = 1..k_max at once (this runs every round: no Python loop over K)."""
        k = np.arange(1, self.k_max + 1)
        model = np.maximum(k - self._n_lookup, 0) if lookup_first else k
        tokens = 1.0 + np.cumsum(np.cumprod(self._plan_probs(lookup_first)))
        cost = model * (self.t_draft.value or 0.0) + curve[k + 1] + (self.t_overhead.value or 0.0)
        return tokens / cost

    def _curve(self) -> np.ndarray:
        """verify_time(n) for n = 0..k_max + 1, with one line fit for the unmeasured sizes."""
        n = np.arange(self.k_max + 2, dtype=float)
        pts = {b: e.value for b, e in self.verify.items() if e.value is not None}
        if len(pts) < 2:
            return np.array([self.verify_time(int(b)) for b in n])
        out = self._line_at(pts, n)
        for b, t in pts.items():
            if b < len(out):
                out[b] = t
        return out

    def best_plan(self, sources: str = "both") -> tuple[int, bool]:
        """(K, lookup first) with the highest expected tokens per second; (0, False) when none."""
        plans = self._plans(sources)
        if not plans:
            return 0, False
        curve = self._curve()
        rates = {lf: self._rates(lf, curve) for lf in {lf for _, lf in plans}}
        return max(plans, key=lambda p: rates[p[1]][p[0] - 1])

    def best_k(self) -> int:
        k, self.lookup_first = self.best_plan()
        return k

    # -- protocol -----------------------------------------------------------------------------
    def choose(self) -> int:
        self.lookup_first = False
        if self._probe:  # a few probe rounds measure the costs before the model is trusted
            return self._probe.pop(0)
        if self.plain_left > 0:
            self.plain_left -= 1
            self._reprobe = self.plain_left == 0
            return self._lookup_or_plain()
        k = self.best_k()
        if k == 0:  # nothing to draft with (lookup only, and no match this round)
            return 0
        first, self._predict_start = self._predict_start, False
        if first and self.expected_rate(k) < self.expected_rate(0):
            self.started_plain = True  # said once in the stats, instead of a "fallback"
            self._plain_stretch()
            return self._lookup_or_plain()
        if self._reprobe and self.has_model:  # one real round after a fallback, at the K measured
            self._reprobe = False  # longest ago: fresh evidence where the estimate is stalest
            k, self.lookup_first = self.best_plan("model")  # can win speculation back
            return self._stalest(range(self.k_min, k + 1), k)
        if self.expected_rate(k) < self.expected_rate(0):
            if self.has_model and self.tried[0] >= self.min_evidence:
                self._fall_back()
                return self._lookup_or_plain()
            if self.lookup_first or not self.has_model:  # this round's lookup cannot pay: a plain step
                self.lookup_first = False
                return 0
            # else: too little evidence to judge the draft model yet; its best K keeps measuring
        self._stretch = 1  # speculation pays again: the next fallback re-probes soon
        if not self.lookup_first and self._rounds and self._rounds % self.explore_every == 0:
            return self._explore(k)
        return k

    def _lookup_or_plain(self) -> int:
        """While the draft model sits out, a lookup match may still pay on its own (it costs no
        draft time): its best K if that beats a plain step, else 0."""
        k, _ = self.best_plan("lookup")
        if k and self.expected_rate(k, True) > self.expected_rate(0):
            self.lookup_first = True
            return k
        return 0

    def _explore(self, best: int) -> int:
        """In turn: whichever of the two K above the best was measured longer ago (a hill climb for
        flat GPU verify curves that can step over a bad batch size on a saw-toothed CPU curve), and
        the smaller K measured longest ago (so a timing a one-off stall left too high is retaken)."""
        self._explores += 1
        if self._explores % 2 and best < self.k_max:
            return self._stalest(range(best + 1, min(best + 2, self.k_max) + 1), best)
        if best == self.k_min:
            return min(best + 1, self.k_max)
        return self._stalest(range(self.k_min, best), best)

    def _stalest(self, ks: range, best: int) -> int:
        return min(ks, key=lambda j: (self._seen_at.get(j + 1, -1), abs(best - j)))

    def _fall_back(self) -> None:
        self.fallbacks += 1
        self._plain_stretch()
        self.recent.clear()

    def _plain_stretch(self) -> None:
        """Plain rounds before the next re-probe: a re-probe is not free (the draft first catches up
        on every token since it last drafted), so each one that finds speculation still losing
        doubles the wait, up to 16x."""
        self.plain_left = self.reprobe_after * self._stretch - 1
        self._stretch = min(2 * self._stretch, 16)

    def observe(
        self,
        *,
        k: int,
        n_drafted: int,
        n_accepted: int,
        n_emitted: int,
        draft_s: float,
        verify_s: float,
        round_s: float,
        batch_tokens: int | None = None,
        n_lookup: int = 0,
    ) -> None:
        """One round's outcome; `batch_tokens` is the verify batch's size over every sequence in it
        (None or n_drafted + 1 when this sequence was alone); the first `n_lookup` drafts came from
        the lookup (at no draft time), the rest from the draft model."""
        alone = batch_tokens is None or batch_tokens == n_drafted + 1
        if not alone:
            self._observe_shared(n_drafted, n_accepted, verify_s, batch_tokens, n_lookup)
            return
        self._rounds += 1
        if self._seen_first:  # the first round pays one-off costs (graph building): not a timing
            self.verify.setdefault(n_drafted + 1, _Floor()).add(verify_s)
            self._seen_at[n_drafted + 1] = self._rounds
            self.t_overhead.add(max(round_s - draft_s - verify_s, 0.0))
            if n_drafted > n_lookup:
                self.t_draft.add(draft_s / (n_drafted - n_lookup))
        self._seen_first = True
        if n_drafted == 0:
            return
        self._learn_acceptance(n_drafted, n_accepted, n_lookup)
        if n_lookup:  # a lookup plan is judged each round by its match's own evidence; the window
            return  # below is the draft model's verdict, and a few missed short matches must not sway it
        self.recent.append((n_emitted, round_s))
        if len(self.recent) == self.recent.maxlen and self.verify.get(1):
            toks = sum(n for n, _ in self.recent)
            secs = sum(s for _, s in self.recent)
            # like with like: realised rounds (stalls included) against the mean plain step, not its
            # floor; a 10% margin, as a 16-round window is noisy and the model already judges close calls
            self.recent.clear()  # windows do not overlap: one verdict per window, not a test per round
            if toks / secs < 0.9 / (self.verify[1].mean + (self.t_overhead.value or 0.0)):
                self._fall_back()

    def _observe_shared(
        self, n_drafted: int, n_accepted: int, verify_s: float, batch_tokens: int, n_lookup: int
    ) -> None:
        """A round shared with other sequences: the verify time belongs to the whole batch (each of
        its sequences reports the same one, kept once), acceptance to this sequence; the realised-rate
        fallback is a single-stream judgement and is not applied."""
        self._rounds += 1
        floor = self.verify.setdefault(batch_tokens, _Floor())
        if self._seen_first and (not floor.samples or floor.samples[-1] != verify_s):
            floor.add(verify_s)
            self._seen_at[batch_tokens] = self._rounds
        self._seen_first = True
        if n_drafted:
            self._learn_acceptance(n_drafted, n_accepted, n_lookup)

    def observe_unused_offer(self, n_checked: int, n_kept: int) -> None:
        """A round that did not use the lookup's proposal still shows what it was worth: its first
        n_checked tokens set against the n_checked tokens the round emitted, the first n_kept of
        them equal. An emitted token is the target's own choice (greedy; coupled sampling's noise
        pick; or, marginally, a sample from p), so equality is what verifying the proposal would
        have found (for a sample: with probability p(x), as the one-point p/q rule keeps it).
        Without this, a match-length bucket that one early miss put below the draft model would
        never be tried again."""
        if n_checked and self._bucket >= 0:
            b = self._bucket
            _learn(self.lk_acc[b], self.lk_tried[b], n_checked, n_kept, self.decay)

    def _learn_acceptance(self, n_drafted: int, n_accepted: int, n_lookup: int = 0) -> None:
        """Per source: the lookup's tokens come first, the draft model's only count when reached."""
        if n_lookup:
            b = self._bucket
            _learn(self.lk_acc[b], self.lk_tried[b], n_lookup, min(n_accepted, n_lookup), self.decay)
        if n_drafted > n_lookup and n_accepted >= n_lookup:
            _learn(self.acc, self.tried, n_drafted - n_lookup, n_accepted - n_lookup, self.decay)


def _fit(pts: dict[int, float]) -> tuple[float, float]:
    """Intercept and slope of a line through the measured (batch size, seconds) points; the slope
    never negative (a bigger batch never costs less), the caller floors it at the cheapest point."""
    b1, b0 = np.polyfit(np.array(list(pts), dtype=float), np.array(list(pts.values()), dtype=float), 1)
    return float(b0), max(float(b1), 0.0)


def _learn(acc: np.ndarray, tried: np.ndarray, n_drafted: int, n_accepted: int, decay: float) -> None:
    upto = min(n_drafted, len(acc))
    acc *= decay
    tried *= decay
    tried[:upto] += np.arange(upto) <= n_accepted  # positions reached in this round
    acc[: min(n_accepted, upto)] += 1


def choose_batch(ctls: list[FixedK | AutoK], draft_batch_cost: float = 0.15) -> list[int]:
    """K for each sequence of one round. Alone, a sequence's controller decides as it always has.
    Together, fixed Ks stay as asked; for the auto ones the round's expected tokens per second is
    maximised over a common draft depth (the batched draft steps cost the same whoever drafts in
    them), never above what each one's own controller picks, and then a sequence whose drafts do not
    pay for their share of the verify batch drafts less. Each extra sequence in a batched draft step
    is assumed to cost `draft_batch_cost` of a single one."""
    own = [c.choose() for c in ctls]
    autos = [i for i, c in enumerate(ctls) if isinstance(c, AutoK)]
    if len(ctls) == 1 or not autos:
        return own
    costs: AutoK = ctls[autos[0]]  # forks of one engine's tuner share these timings
    plain = [0 if i in autos else k for i, k in enumerate(own)]
    floor = costs.verify.get(sum(k + 1 for k in plain))
    if floor is None or floor.value is None:  # time the plain batch first: a plain round is never a
        return plain  # bad one, and drafting must beat its measured cost, not a line's guess at it
    t_d = costs.t_draft.value or 0.0
    o = costs.t_overhead.value or 0.0

    def rate(ks: list[int]) -> float:
        tokens = sum(c.expected_tokens(k) for c, k in zip(ctls, ks))
        model = [c.model_tokens(k) for c, k in zip(ctls, ks)]  # lookup drafts cost no draft step
        n_drafting = sum(m > 0 for m in model)
        draft_s = max(model) * t_d * (1 + draft_batch_cost * max(n_drafting - 1, 0))
        return tokens / (draft_s + costs.verify_time(sum(k + 1 for k in ks)) + o)

    def at_depth(depth: int) -> list[int]:
        ks = list(own)
        for i in autos:
            k = min(own[i], depth)
            ks[i] = max(k, ctls[i].k_min) if k > 0 else 0
        return ks

    best, ks = max(((rate(at_depth(d)), at_depth(d)) for d in range(max(own) + 1)), key=lambda x: x[0])
    improved = True
    while improved:  # trim where a sequence's drafts cost the batch more than they bring
        improved = False
        for i in autos:
            if ks[i] > 0:
                trial = list(ks)
                trial[i] = ks[i] - 1 if ks[i] - 1 >= ctls[i].k_min else 0
                r = rate(trial)
                if r > best:
                    best, ks, improved = r, trial, True
    return ks
