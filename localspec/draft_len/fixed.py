"""`--draft-max K`: K tokens every round; a long enough lookup match supplies the first of them."""

from __future__ import annotations

FIXED_LOOKUP_MIN = 4  # a fixed K puts lookup tokens first only from this match length on


class FixedK:
    costs = None  # nothing to tune

    def __init__(self, k: int, *, has_model: bool = True) -> None:
        self.k = k
        self.has_model = has_model
        self.fallbacks = 0
        self.started_plain = False
        self.lookup_first = False
        self._n_lookup = 0
        self.n_forced = self.forced_take = 0  # the grammar's free tokens: they ride on top of K

    def offer_forced(self, n: int) -> None:
        self.n_forced = self.forced_take = n

    def offer_lag(self, behind: int, left: int) -> None:  # a fixed K drafts whatever the catch-up
        pass

    def offer(self, n_lookup: int, match_len: int) -> None:
        self.lookup_first = n_lookup > 0 and (match_len >= FIXED_LOOKUP_MIN or not self.has_model)
        self._n_lookup = n_lookup if self.lookup_first else 0

    def choose(self) -> int:
        return self.k if self.has_model else min(self.k, self._n_lookup)

    def expected_tokens(self, k: int) -> float:
        return 1.0 + self.n_forced + k

    def model_tokens(self, k: int) -> int:
        return k - min(k, self._n_lookup)

    def observe(self, **_round: float) -> None:  # a fixed K learns nothing from a round
        pass

    def observe_unused_offer(self, n_checked: int, n_kept: int) -> None:
        pass
