"""Acceptance evidence per draft source: how often a draft at each position is kept, for the drafter,
and for each free source that offers (the lookup, the history) by its name, per match-length bucket
(a match's length is its confidence). Decayed counts with a prior, so a few rounds move the estimate
and old text is forgotten (~20 rounds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# the kinds of evidence a draft source feeds (decode/sources declares each source's): acceptance by
# draft position (a drafter), or by match length (an offering source, under its own name); drafts
# kept for certain (the grammar's forced tokens) feed none
MODEL, LOOKUP = "model", "by-match"
# lookup matches are judged by their length: 2, 3, 4-7, 8-15 and 16+ matched tokens
LOOKUP_BUCKETS = (2, 3, 4, 8, 16)
# a match's next token is kept this often, per bucket, over the bench prompts of every kind
# (research/lookup_priors.py); sampling keeps it with probability p(x), less often than greedy does
LOOKUP_PRIORS = (0.5, 0.65, 0.7, 0.9, 0.95)
LOOKUP_PRIORS_SAMPLED = (0.4, 0.55, 0.65, 0.8, 0.9)  # T = 0.8


def lookup_bucket(match_len: int) -> int:
    return sum(match_len >= b for b in LOOKUP_BUCKETS) - 1


@dataclass
class Evidence:
    k_max: int = 16
    prior_accept: float = 0.7  # before any evidence: a typical same-family pair
    prior_weight: float = 2.0
    # a match's next token is right this often before any evidence, by match-length bucket
    prior_lookup: tuple[float, ...] = LOOKUP_PRIORS
    decay: float = 0.95  # per-round forgetting (~20-round memory)
    acc: np.ndarray = field(default=None)  # type: ignore[assignment]  # the draft model's, by position
    tried: np.ndarray = field(default=None)  # type: ignore[assignment]
    # per offering source, by its name: (kept, tried) per match-length bucket and position
    offers: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.acc is None:
            self.acc, self.tried = np.zeros(self.k_max), np.zeros(self.k_max)

    def offer_evidence(self, source: str) -> tuple[np.ndarray, np.ndarray]:
        """The source's (kept, tried) by bucket and position, made empty on its first use."""
        ev = self.offers.get(source)
        if ev is None:
            shape = (len(LOOKUP_BUCKETS), self.k_max)
            ev = self.offers[source] = (np.zeros(shape), np.zeros(shape))
        return ev

    def scaled(self, w: float) -> "Evidence":
        """A copy at weight w: a new request starts from what earlier ones saw, discounted (its text
        may draft better or worse)."""
        return Evidence(
            self.k_max, self.prior_accept, self.prior_weight, self.prior_lookup, self.decay,
            self.acc * w, self.tried * w, {n: (a * w, t * w) for n, (a, t) in self.offers.items()},
        )  # fmt: skip

    def age_model(self, w: float) -> None:
        """The drafter's evidence weighed by w: text it did not draft over has moved on."""
        self.acc *= w
        self.tried *= w

    def take(self, other: "Evidence") -> None:
        """Take another's evidence as this one's (a finished request's, for the next to start from)."""
        self.acc, self.tried = other.acc.copy(), other.tried.copy()
        self.offers = {n: (a.copy(), t.copy()) for n, (a, t) in other.offers.items()}

    def prime(self, acc: Sequence[float], tried: Sequence[float]) -> None:
        """Remembered evidence, at full weight (each request's fork takes it at a quarter)."""
        m = min(len(acc), self.k_max)
        self.acc[:m] += np.asarray(acc[:m], dtype=float)
        self.tried[:m] += np.asarray(tried[:m], dtype=float)

    def accept_probs(self) -> np.ndarray:
        """Posterior-mean acceptance per position, conditional on reaching that position. Deeper
        positions, rarely reached, take the first position's estimate as their prior rather than a
        fixed guess, which would pull the chosen K towards whatever the guess favours."""
        w = self.prior_weight
        first = (self.acc[0] + self.prior_accept * w) / (self.tried[0] + w)
        return (self.acc + first * w) / (self.tried + w)

    def offer_probs(self, source: str, bucket: int) -> np.ndarray:
        """`accept_probs` for a source's tokens offered from a match in this length bucket."""
        w = self.prior_weight
        ev = self.offers.get(source)
        acc, tried = (ev[0][bucket], ev[1][bucket]) if ev is not None else (np.zeros(self.k_max),) * 2
        first = (acc[0] + self.prior_lookup[bucket] * w) / (tried[0] + w)
        return (acc + first * w) / (tried + w)

    def learn(
        self, n_drafted: int, n_accepted: int, n_offered: int = 0, source: str = "", bucket: int = -1
    ) -> None:
        """One round: the leading offer's tokens come first, the drafter's only count when reached."""
        if n_offered:
            kept, tried = self.offer_evidence(source)
            _learn(kept[bucket], tried[bucket], n_offered, min(n_accepted, n_offered), self.decay)
        if n_drafted > n_offered and n_accepted >= n_offered:
            _learn(self.acc, self.tried, n_drafted - n_offered, n_accepted - n_offered, self.decay)

    def learn_offer(self, source: str, bucket: int, n_checked: int, n_kept: int) -> None:
        """An offer judged without being verified (Outcome.judged, in AutoK.observe)."""
        kept, tried = self.offer_evidence(source)
        _learn(kept[bucket], tried[bucket], n_checked, n_kept, self.decay)


def _learn(acc: np.ndarray, tried: np.ndarray, n_drafted: int, n_accepted: int, decay: float) -> None:
    upto = min(n_drafted, len(acc))
    acc *= decay
    tried *= decay
    tried[:upto] += np.arange(upto) <= n_accepted  # positions reached in this round
    acc[: min(n_accepted, upto)] += 1
