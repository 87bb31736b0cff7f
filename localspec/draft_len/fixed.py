"""`--draft-max K`: K tokens every round; a long enough match of a free source supplies the first."""

from __future__ import annotations

from localspec.draft_len.controller import Facts, Outcome, Plan

FIXED_LOOKUP_MIN = 4  # a fixed K puts an offer's tokens first only from this confidence (match length) on


class FixedK:
    costs = None  # nothing to tune
    fallbacks = 0
    started_plain = False

    def __init__(self, k: int, *, has_model: bool = True) -> None:
        self.k = k
        self.k_min = k
        self.has_model = has_model
        self.learns = type(self).observe is not FixedK.observe  # a subclass may listen to the rounds
        self._plain = Plan(k if has_model else 0)  # the plan of a round without offers or forced tokens

    def plan(self, facts: Facts) -> Plan:
        """K, the first offer's tokens first from a long enough match (any match, with no drafter),
        and every forced token on top of K."""
        if not facts.offers and not facts.n_forced:  # the common round: one frozen plan, made once
            return self._plain
        first = facts.offers[0] if facts.offers else None
        lead = first if first and (first.confidence >= FIXED_LOOKUP_MIN or not self.has_model) else None
        k = self.k if self.has_model else min(self.k, len(lead.tokens) if lead else 0)
        return Plan(k, lead.source if lead else None, facts.n_forced)

    def observe(self, outcome: Outcome) -> None:  # a fixed K learns nothing from a round
        pass

    def expected_tokens(self, facts: Facts, plan: Plan, k: int) -> float:
        return 1.0 + facts.n_forced + k

    def model_tokens(self, facts: Facts, plan: Plan, k: int) -> int:
        return k - min(k, offered(facts, plan.lead))


def offered(facts: Facts, lead: str | None) -> int:
    """How many tokens the leading offer proposes (0: none leads)."""
    if lead is None:
        return 0
    return next((len(o.tokens) for o in facts.offers if o.source == lead), 0)
