"""`--draft-max K`: K tokens every round; a long enough lookup match supplies the first of them."""

from __future__ import annotations

from localspec.draft_len.controller import Facts, Outcome, Plan

FIXED_LOOKUP_MIN = 4  # a fixed K puts lookup tokens first only from this match length on


class FixedK:
    costs = None  # nothing to tune
    fallbacks = 0
    started_plain = False

    def __init__(self, k: int, *, has_model: bool = True) -> None:
        self.k = k
        self.k_min = k
        self.has_model = has_model
        self.learns = type(self).observe is not FixedK.observe  # a subclass may listen to the rounds
        self._plain = Plan(k if has_model else 0)  # the plan of a round without lookup or forced tokens

    def plan(self, facts: Facts) -> Plan:
        """K, the lookup's tokens first from a long enough match (any match, with no draft model),
        and every forced token on top of K."""
        if not facts.n_lookup and not facts.n_forced:  # the common round: one frozen plan, made once
            return self._plain
        lookup_first = facts.n_lookup > 0 and (facts.match_len >= FIXED_LOOKUP_MIN or not self.has_model)
        k = self.k if self.has_model else min(self.k, facts.n_lookup if lookup_first else 0)
        return Plan(k, lookup_first, facts.n_forced)

    def observe(self, outcome: Outcome) -> None:  # a fixed K learns nothing from a round
        pass

    def expected_tokens(self, facts: Facts, plan: Plan, k: int) -> float:
        return 1.0 + facts.n_forced + k

    def model_tokens(self, facts: Facts, plan: Plan, k: int) -> int:
        return k - min(k, facts.n_lookup if plan.lookup_first else 0)
