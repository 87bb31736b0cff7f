"""What a round's plans are worth: expected tokens per second for every K, from the machine's costs
(costs.py), the acceptance evidence (evidence.py) and what the round knows (`Facts`):

    rate(K) = (f + 1 + sum_{k<=K} prod_{i<=k} a_i) / (m(K) * t_d + T(f + K + 1) + o + replay(K))

where f is the grammar's forced run (free, kept for certain, in the batch), a_i the acceptance at
draft position i, m(K) the drafts the drafter makes (an offer's tokens cost no draft time), T(n)
the verify time of a batch of n tokens, o the per-round overhead, and replay(K) what a snapshot
rollback adds to the next round. K = 0 is a plain step. A plan is (K, lead): the drafter alone
(lead None), or an offer's tokens first (lead: its source's name) with the drafter extending them,
each source's acceptance learned under its name per match length. Pure: a `Pricing` is made for one
round and changes nothing.
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

    def n_offered(self, lead: str | None) -> int:
        """The leading offer's tokens this round (none without one)."""
        if lead is None:
            return 0
        return next((len(o.tokens) for o in self.facts.offers if o.source == lead and o.confidence > 0), 0)

    def bucket(self, lead: str) -> int:
        """The leading offer's match-length bucket (its evidence)."""
        return lookup_bucket(next(o.confidence for o in self.facts.offers if o.source == lead))

    def model_tokens(self, k: int, lead: str | None) -> int:
        """Of K drafts, how many the drafter makes (the rest come from the leading offer)."""
        return k - min(k, self.n_offered(lead)) if lead is not None else k

    def expected_tokens(self, k: int, lead: str | None) -> float:
        """Tokens one round with K drafts emits, on average (the target's own token included)."""
        if k <= 0:
            return 1.0 + self.facts.n_forced
        return 1.0 + self.facts.n_forced + float(np.cumprod(self.plan_probs(lead)[:k]).sum())

    def expected_rate(self, k: int, lead: str | None) -> float:
        o = self.costs.t_overhead.value or 0.0
        f = self.facts.n_forced
        if k == 0:
            return (1.0 + f) / (self.costs.verify_time(1 + f) + o)
        draft_s = self.model_tokens(k, lead) * (self.costs.t_draft.value or 0.0)
        replay = 0.0
        if self.costs.replay:
            reach = np.cumprod(self.plan_probs(lead))[:k]
            replay = float(self.costs.replay_cost(reach, self.costs.curve(self.k_max + f))[k - 1])
        return self.expected_tokens(k, lead) / (draft_s + self.costs.verify_time(f + k + 1) + o + replay)

    def plans(self, model: bool = True, offers: bool = True) -> list[tuple[int, str | None]]:
        """(K, lead) candidates: the drafter's alone (`model`, where there is one), and each offer's
        tokens first (`offers`), the drafter extending them where there is one, else the offer's
        tokens alone (no drafter time)."""
        model = self.has_model and model
        plans: list[tuple[int, str | None]] = (
            [(k, None) for k in range(self.k_min, self.k_max + 1)] if model else []
        )
        for o in self.facts.offers if offers else ():
            n = self.n_offered(o.source)
            if n:
                top = self.k_max if model else min(n, self.k_max)
                plans += [(k, o.source) for k in range(self.k_min if model else 1, top + 1)]
        return plans

    def plan_probs(self, lead: str | None) -> np.ndarray:
        """Acceptance by draft position (up to k_max) of a plan: the leading offer's first."""
        probs = self.evidence.accept_probs()
        if lead is None:
            return probs
        n = min(self.n_offered(lead), self.k_max)
        return np.concatenate(
            [self.evidence.offer_probs(lead, self.bucket(lead))[:n], probs[: self.k_max - n]]
        )

    def rates(self, lead: str | None, curve: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """expected_rate for K = 1..k_max at once (this runs every round: no Python loop over K);
        `probs`: acceptance by position in place of the plan's evidence."""
        k = np.arange(1, self.k_max + 1)
        model = np.maximum(k - self.n_offered(lead), 0) if lead is not None else k
        reach = np.cumprod(self.plan_probs(lead) if probs is None else probs)
        f = self.facts.n_forced
        tokens = 1.0 + f + np.cumsum(reach)
        t_d, o = self.costs.t_draft.value or 0.0, self.costs.t_overhead.value or 0.0
        cost = model * t_d + curve[f + k + 1] + o
        return tokens / (cost + self.costs.replay_cost(reach, curve))

    def best_plan(self, model: bool = True, offers: bool = True) -> tuple[int, str | None]:
        """(K, lead) with the highest expected tokens per second; (0, None) when none."""
        plans = self.plans(model, offers)
        if not plans:
            return 0, None
        curve = self.costs.curve(self.k_max + self.facts.n_forced)
        rates = {lead: self.rates(lead, curve) for lead in dict.fromkeys(lead for _, lead in plans)}
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
        """The drafter's rate at its best K if it drafted every token right."""
        curve = self.costs.curve(self.k_max + self.facts.n_forced)
        return float(self.rates(None, curve, np.ones(self.k_max)).max())
