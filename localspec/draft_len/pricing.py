"""What a round's plans are worth: expected tokens per second for every K, from the machine's costs
(costs.py), the acceptance evidence (evidence.py) and what the round knows (`Facts`):

    rate(K) = (f + 1 + sum_{k<=K} prod_{i<=k} a_i) / (m(K) * t_d + T(f + K + 1) + o + replay(K))

where f is the grammar's forced run (free, kept for certain, in the batch), a_i the acceptance at
draft position i, m(K) the drafts the draft model makes (a lookup's tokens cost no draft time),
T(n) the verify time of a batch of n tokens, o the per-round overhead, and replay(K) what a
snapshot rollback adds to the next round. K = 0 is a plain step. A plan is (K, lookup first): the
draft model alone, or the lookup's tokens first with the draft model extending them, the lookup's
acceptance learned per match length. Pure: a `Pricing` is made for one round and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.draft_len.controller import Facts
from localspec.draft_len.costs import Costs
from localspec.draft_len.evidence import Evidence, lookup_bucket


@dataclass(frozen=True)
class Pricing:
    k_min: int
    k_max: int
    has_model: bool
    costs: Costs
    evidence: Evidence
    facts: Facts

    @property
    def n_lookup(self) -> int:
        """The lookup's tokens this round (none without a match)."""
        return self.facts.n_lookup if self.facts.match_len > 0 else 0

    @property
    def bucket(self) -> int:
        """The lookup match's length bucket (its evidence), -1 when it offers nothing."""
        return lookup_bucket(self.facts.match_len) if self.n_lookup else -1

    def model_tokens(self, k: int, lookup_first: bool) -> int:
        """Of K drafts, how many the draft model makes (the rest come from the lookup)."""
        return k - min(k, self.n_lookup) if lookup_first else k

    def expected_tokens(self, k: int, lookup_first: bool) -> float:
        """Tokens one round with K drafts emits, on average (the target's own token included)."""
        if k <= 0:
            return 1.0 + self.facts.n_forced
        return 1.0 + self.facts.n_forced + float(np.cumprod(self.plan_probs(lookup_first)[:k]).sum())

    def expected_rate(self, k: int, lookup_first: bool) -> float:
        o = self.costs.t_overhead.value or 0.0
        f = self.facts.n_forced
        if k == 0:
            return (1.0 + f) / (self.costs.verify_time(1 + f) + o)
        draft_s = self.model_tokens(k, lookup_first) * (self.costs.t_draft.value or 0.0)
        replay = 0.0
        if self.costs.replay:
            reach = np.cumprod(self.plan_probs(lookup_first))[:k]
            replay = float(self.costs.replay_cost(reach, self.costs.curve(self.k_max + f))[k - 1])
        return self.expected_tokens(k, lookup_first) / (
            draft_s + self.costs.verify_time(f + k + 1) + o + replay
        )

    def plans(self, sources: str) -> list[tuple[int, bool]]:
        """(K, lookup first) candidates. sources: both; model (the draft model alone); lookup (the
        lookup's tokens alone, no draft model time)."""
        model = self.has_model and sources != "lookup"
        plans = [(k, False) for k in range(self.k_min, self.k_max + 1)] if model else []
        if self.n_lookup and sources != "model":
            top = self.k_max if model else min(self.n_lookup, self.k_max)
            plans += [(k, True) for k in range(self.k_min if model else 1, top + 1)]
        return plans

    def plan_probs(self, lookup_first: bool) -> np.ndarray:
        """Acceptance by draft position (up to k_max) of a plan: the lookup's first, when it leads."""
        probs = self.evidence.accept_probs()
        if not lookup_first:
            return probs
        n = min(self.n_lookup, self.k_max)
        return np.concatenate([self.evidence.lookup_probs(self.bucket)[:n], probs[: self.k_max - n]])

    def rates(self, lookup_first: bool, curve: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """expected_rate for K = 1..k_max at once (this runs every round: no Python loop over K);
        `probs`: acceptance by position in place of the plan's evidence."""
        k = np.arange(1, self.k_max + 1)
        model = np.maximum(k - self.n_lookup, 0) if lookup_first else k
        reach = np.cumprod(self.plan_probs(lookup_first) if probs is None else probs)
        f = self.facts.n_forced
        tokens = 1.0 + f + np.cumsum(reach)
        t_d, o = self.costs.t_draft.value or 0.0, self.costs.t_overhead.value or 0.0
        cost = model * t_d + curve[f + k + 1] + o
        return tokens / (cost + self.costs.replay_cost(reach, curve))

    def best_plan(self, sources: str = "both") -> tuple[int, bool]:
        """(K, lookup first) with the highest expected tokens per second; (0, False) when none."""
        plans = self.plans(sources)
        if not plans:
            return 0, False
        curve = self.costs.curve(self.k_max + self.facts.n_forced)
        rates = {lf: self.rates(lf, curve) for lf in {lf for _, lf in plans}}
        return max(plans, key=lambda p: rates[p[1]][p[0] - 1])

    def best_cut(self) -> tuple[int, float]:
        """(forced tokens to take, the rate) of the best plan without drafts: all of the forced run,
        or only its first t where a batch of t + 1 tokens costs less per token (a saw-toothed CPU
        curve). Either way t + 1 tokens come out: the target's token after the last one taken."""
        n = self.facts.n_forced
        o = self.costs.t_overhead.value or 0.0
        curve = self.costs.curve(n)
        t = np.arange(n + 1)
        rates = (t + 1) / (curve[t + 1] + o)
        best = int(np.argmax(rates))
        return best, float(rates[best])

    def all_kept_rate(self) -> float:
        """The draft model's rate at its best K if it drafted every token right."""
        curve = self.costs.curve(self.k_max + self.facts.n_forced)
        return float(self.rates(False, curve, np.ones(self.k_max)).max())
