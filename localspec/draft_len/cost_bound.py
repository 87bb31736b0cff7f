"""A request's cost bound: what its rounds may cost per token they emit, in plain steps.

A request may ask for a fixed K (`draft_max`) or a floor under auto's K (`draft_min`), and a fixed K
is otherwise drafted and verified whatever it costs and however little of it is kept: at K = 64 a
round is 64 draft steps and a 65-token verify (dozens of plain steps on a CPU) for the one or two
tokens it emits while acceptance is low, and every request sharing the round waits for it. So the
round asks this bound how many drafts the request may have (`k_cap`, every source together), and
tells it what each round cost the request: its own draft steps and its share of the verify batch.
The bound keeps decayed sums of those seconds and of what the request's emitted tokens earn
(`bound` plain steps each, a plain step being the engine's measured one-token decode) and moves the
cap as TCP moves a window: halved after a round over budget, one more after a round well under it.
A request whose drafts pay never meets the bound; one whose drafts are rejected is brought down to
what it can pay for, down to plain decoding. The answer is unchanged: drafts only change speed.
"""

from __future__ import annotations

from typing import Callable

DECAY = 0.9  # per round: the bound looks at the last ten rounds or so
REGAIN = 0.5  # a round under this share of the budget lets the cap grow by one


class CostBound:
    def __init__(self, bound: float, plain_s: Callable[[], float | None], k_cap: int) -> None:
        """`bound`: plain steps a request's rounds may cost per emitted token; `plain_s()`: the
        engine's seconds for a one-token decode (None while unknown: no bound yet); `k_cap`: the
        most drafts a round may have for it to begin with (what it asked, capped by the engine)."""
        self.bound, self._plain_s = bound, plain_s
        self.k_cap = self.k_max = k_cap
        self.spent = self.earned = 0.0
        self.cut = 0  # rounds after which the cap came down (the stats count them)

    def observe(self, seconds: float, n_emitted: int, n_drafts: int = 1) -> None:
        """One round: what it cost this request, how many tokens it emitted and how many drafts it
        verified. A round without drafts is charged a plain step a token (what it took beyond that
        was the machine's: fewer drafts could not save it) and cuts nothing; it lets the cap grow
        back by one (a cap cut to 0 would hold for good: a plain step is never well under a bound
        of 2, and a request whose cap a stalled round took to 0 never drafted again)."""
        plain = self._plain_s()
        if plain is None or plain <= 0:
            return
        self.spent = DECAY * self.spent + (seconds if n_drafts else n_emitted * plain)
        self.earned = DECAY * self.earned + n_emitted * self.bound * plain
        if not n_drafts:
            self.k_cap = min(self.k_cap + 1, self.k_max)
        elif self.spent > self.earned and self.k_cap > 0:
            self.k_cap //= 2
            self.cut += 1
        elif self.spent < REGAIN * self.earned and self.k_cap < self.k_max:
            self.k_cap += 1


def round_charge(
    draft_s: float, own_steps: int, longest: int, verify_s: float, own_tokens: int, batch_tokens: int
) -> float:
    """A request's seconds in a shared round: its draft-model steps at the round's time per step
    (the batched draft decodes run `longest` steps), and the verify batch's time in proportion to
    its tokens there."""
    draft = draft_s * own_steps / longest if longest else 0.0
    return draft + (verify_s * own_tokens / batch_tokens if batch_tokens else 0.0)
